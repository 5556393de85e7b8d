"""Stand-ins for vLLM's request and output shapes, for testing VLLMBackend where vLLM cannot run.

vLLM needs a CUDA GPU and cannot be installed on the machines these tests run on, so the
adapter is tested against these small classes. They mirror vLLM's *documented* shapes and no
more: ``SamplingParams`` (the fields the adapter sets), ``RequestOutputKind``,
``RequestOutput`` / ``CompletionOutput`` / ``Logprob``, and an engine whose
``generate(prompt, sampling_params, request_id)`` yields scripted outputs the way vLLM's
``AsyncLLM`` does (cumulative or DELTA outputs, stop strings cut from the text and named in
``stop_reason``, text held back while it might begin a stop string while the tokens go out at
once, the end-of-sequence token in ``token_ids``) and whose ``abort`` records its calls.
The real engine is exercised by the ``gpu`` test in test_vllm_adapter.py.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any


class StandInRequestOutputKind(enum.Enum):
    """vllm.sampling_params.RequestOutputKind."""

    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


@dataclass
class StandInSamplingParams:
    """vllm.SamplingParams, the fields VLLMBackend sets; top_k validated as older vLLM did."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    repetition_penalty: float = 1.0
    max_tokens: int | None = 16
    seed: int | None = None
    stop: list[str] | None = None
    logprobs: int | None = None
    output_kind: StandInRequestOutputKind = StandInRequestOutputKind.CUMULATIVE
    structured_outputs: Any = None

    def __post_init__(self) -> None:
        if self.top_k < -1 or self.top_k == 0:
            raise ValueError(f"top_k must be -1 (disable), or at least 1, got {self.top_k}.")
        self.stop = list(self.stop or [])


@dataclass
class StandInLogprob:
    """vllm.sequence.Logprob."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class StandInCompletionOutput:
    """vllm.outputs.CompletionOutput."""

    index: int
    text: str
    token_ids: Sequence[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, StandInLogprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class StandInRequestOutput:
    """vllm.outputs.RequestOutput."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int] | None
    prompt_logprobs: Any
    outputs: list[StandInCompletionOutput]
    finished: bool
    num_cached_tokens: int | None = 0


@dataclass
class Step:
    """One token the stand-in engine samples: its text, id, log-probability and the top-1 rival."""

    text: str
    logprob: float
    token_id: int = 0
    top_text: str | None = None  # when the sampled token was not the most likely one
    top_logprob: float | None = None
    eos: bool = False


EOS_ID = 2
EOS_TEXT = "<|im_end|>"


def steps(*pieces: tuple[str, float] | str, eos: bool = True) -> list[Step]:
    """Steps from (text, logprob) pairs (a bare string gets -0.01), ending with end of sequence."""
    out = []
    for i, p in enumerate(pieces):
        text, lp = (p, -0.01) if isinstance(p, str) else p
        out.append(Step(text, lp, token_id=100 + i))
    if eos:
        out.append(Step("", -0.05, token_id=EOS_ID, eos=True))
    return out


@dataclass
class StandInEngine:
    """vLLM's async engine, scripted: every request samples ``script`` (one step per output).

    ``honor_stop=False`` makes it ignore stop strings (to exercise the adapter's own check);
    ``delay`` is awaited before each step. ``requests`` records (prompt, params, request_id),
    ``aborted`` the ids passed to ``abort``, ``closed`` the requests whose generator ended.
    """

    script: list[Step]
    delay: float = 0.0
    honor_stop: bool = True
    prompt_token_ids: list[int] = field(default_factory=lambda: [1, 5, 6, 7])
    num_cached_tokens: int = 0
    requests: list[tuple[str, StandInSamplingParams, str]] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    steps_taken: int = 0

    async def generate(
        self, prompt: str, sampling_params: StandInSamplingParams, request_id: str
    ) -> AsyncIterator[StandInRequestOutput]:
        self.requests.append((prompt, sampling_params, request_id))
        p = sampling_params
        delta = p.output_kind is StandInRequestOutputKind.DELTA
        stops = p.stop if self.honor_stop else []
        hold = max((len(s) for s in stops), default=1) - 1  # vLLM's stop_buffer_length
        ids: list[int] = []
        lps: list[dict[int, StandInLogprob]] = []
        text = ""
        sent_text = sent_tokens = 0
        try:
            for step in self.script:
                await asyncio.sleep(self.delay)
                if request_id in self.aborted:
                    return
                self.steps_taken += 1
                ids.append(step.token_id)
                entry = {
                    step.token_id: StandInLogprob(
                        step.logprob, 1 if step.top_text is None else 2, EOS_TEXT if step.eos else step.text
                    )
                }
                if step.top_text is not None:
                    entry[999] = StandInLogprob(step.top_logprob, 1, step.top_text)
                lps.append(entry)
                finish = stop_reason = None
                if step.eos:
                    finish = "stop"  # special tokens are skipped in the text
                else:
                    text += step.text
                    hits = [(text.find(s), s) for s in stops if s in text]
                    if hits:
                        at, stop_reason = min(hits)
                        text, finish = text[:at], "stop"
                    elif p.max_tokens is not None and len(ids) >= p.max_tokens:
                        finish = "length"
                visible = text if finish else text[: max(len(text) - hold, sent_text)]
                out = StandInCompletionOutput(
                    index=0,
                    text=visible[sent_text:] if delta else visible,
                    token_ids=ids[sent_tokens:] if delta else list(ids),
                    cumulative_logprob=None,
                    logprobs=(lps[sent_tokens:] if delta else list(lps)) if p.logprobs is not None else None,
                    finish_reason=finish,
                    stop_reason=stop_reason,
                )
                sent_text, sent_tokens = len(visible), len(ids)
                yield StandInRequestOutput(
                    request_id,
                    prompt,
                    list(self.prompt_token_ids),
                    None,
                    [out],
                    finished=finish is not None,
                    num_cached_tokens=self.num_cached_tokens,
                )
                if finish:
                    return
            raise AssertionError("the script ran out before the request finished")
        finally:
            self.closed.append(request_id)

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)


class StandInTokenizer:
    """A Hugging Face tokenizer's ``encode`` / ``decode`` / ``apply_chat_template``, on words."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.calls.append(("encode", {"add_special_tokens": add_special_tokens}))
        ids = [hash(w) % 1000 + 10 for w in text.split()]
        return ([1] if add_special_tokens else []) + ids

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(f"<{i}>" for i in ids)

    def apply_chat_template(
        self, messages: list[dict[str, str]], tokenize: bool = True, add_generation_prompt: bool = False
    ) -> str:
        self.calls.append(
            ("apply_chat_template", {"tokenize": tokenize, "add_generation_prompt": add_generation_prompt})
        )
        body = "".join(f"[{m['role']}]{m['content']}[/]" for m in messages)
        return body + ("[assistant]" if add_generation_prompt else "")
