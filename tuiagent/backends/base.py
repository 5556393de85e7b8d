"""The backend protocol: stream sampled tokens, with their log-probabilities, for a raw prompt."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tuiagent.errors import UserError
from tuiagent.protocol import Sampling, TokenStream


@dataclass
class GenerationStats:
    """Counters a backend keeps across the calls of one run (prefix reuse is measured with them)."""

    prompt_tokens_evaluated: int = 0
    prompt_tokens_total: int = 0
    generated_tokens: int = 0
    calls: int = 0
    extra: dict[str, float] = field(default_factory=dict)


class ContextOverflow(Exception):
    """A prompt does not fit the model's context window (nothing was generated)."""

    def __init__(self, prompt_tokens: int, context_size: int, model_id: str = ""):
        self.prompt_tokens, self.context_size, self.model_id = prompt_tokens, context_size, model_id
        who = f"model {model_id!r}" if model_id else "the model"
        super().__init__(
            f"the prompt has {prompt_tokens} tokens but {who} has a context of {context_size} tokens "
            f"(at least one more is needed to generate): raise context_size for this model in models.toml "
            f"(within what the model was trained for), or shorten the problem, the tool outputs or the token budget"
        )


@runtime_checkable
class Backend(Protocol):
    """A model that continues raw text.

    ``stream`` returns a ``TokenStream`` of the tokens sampled until a stop string (which is not
    yielded), end of sequence or ``sampling.max_tokens``; once it ends, the stream's own
    ``stop_reason`` says which (``"stop"``, ``"eos"``, ``"length"``; ``"cancelled"`` when closed
    early), so concurrent streams on one backend never mix them up. Nothing is sent to the model
    before the first token is asked for. Cancelling the consuming task, or ``aclose()`` on the
    stream, stops generation promptly.
    """

    model_id: str
    stats: GenerationStats

    def stream(self, prompt: str, sampling: Sampling, stop: Sequence[str]) -> TokenStream: ...

    def count_tokens(self, text: str) -> int: ...

    def render_chat(self, messages: Sequence[dict[str, str]]) -> str:
        """Render messages with the model's chat template, ending with an open assistant turn."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class ExactReplay(Protocol):
    """A backend that can bring its model to exactly the state a recorded run left it in (a fork
    continues from there, see ``tuiagent.core.fork``): the recorded turns' prompts and sampled
    ids (``TokenStream.token_ids``, ``TokenStream.layout``) decoded again as they were."""

    def replay(self, prompt: str, token_ids: Sequence[int], stop: Sequence[str]) -> TokenStream: ...

    def fresh(self) -> None:
        """The next generation does not continue the cache of the one before."""
        ...


@runtime_checkable
class ExactResume(Protocol):
    """A backend that can go on with a recorded generation from one of its tokens (an edit fork of
    the model's text, ``tuiagent.core.fork.Edit``): ``kept`` (recorded ids) are decoded as sampling
    decoded them, then ``text``'s tokens, then the model samples on. With no text the
    continuation is the recorded one, token for token and logprob for logprob; the stream yields
    the kept tokens too, and its ``token_ids`` hold every id."""

    def resume(
        self, prompt: str, sampling: Sampling, stop: Sequence[str], kept: Sequence[int], text: str
    ) -> TokenStream: ...


@runtime_checkable
class JsonReplies(Protocol):
    """A backend whose generation can be held to a JSON schema (structured outputs: a llama.cpp
    grammar, vLLM's or a server's ``response_format``), for judges (``core.judge``): the stream
    yields only text the schema allows, with each token's log-probability before the constraint."""

    def stream_json(self, prompt: str, sampling: Sampling, schema: Mapping[str, Any]) -> TokenStream: ...


@runtime_checkable
class Sessions(Protocol):
    """A backend that serves several runs at once, each on a sequence of its own (the batched
    llama.cpp engine, ``backends.llama_batch``): ``session()`` is this backend for one run, and its
    ``aclose`` ends the session, not the model. ``isinstance(backend, Sessions)`` asks whether it can."""

    def session(self) -> Backend: ...


@runtime_checkable
class Failover(Protocol):
    """A backend of several servers that takes a failed one out (``backends.servers.ServerPool``):
    a run that ended ``backend_crashed`` can start again on another while ``serving()`` is not 0."""

    def serving(self) -> int: ...


class BatchedBackend(Backend, Sessions, Protocol):
    """A backend with sessions (``Sessions``): what the compare screen runs its columns on."""


class BackendCrashed(UserError):
    """The model's process died (a native crash, an abort, an out-of-memory kill): the run ends
    with reason ``backend_crashed``; ``str()`` says what crashed, the likely cause and the fix."""

    def __init__(
        self, message: str, *, signal: str | None = None, returncode: int | None = None, log: str | None = None
    ):
        self.signal, self.returncode, self.log = signal, returncode, log
        super().__init__(message)
