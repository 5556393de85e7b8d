"""vLLM's async engine, in process: ``engine.generate(prompt, sampling_params, request_id)``.

Written against vLLM's documented ``SamplingParams`` / ``RequestOutput`` shapes (delta outputs, or
cumulative ones diffed here); the logprob of a token is the sampled id's entry; stop strings go to
vLLM and through ``StopMatcher`` here, with ``TokenAligner`` pairing held-back text and tokens;
closing the stream aborts the request. Options and details: docs/models.md ("vllm"). vllm (and
torch) are imported only by ``create``; building the engine loads the model onto the GPU and
takes a while, so run ``create`` off the event loop.
"""

from __future__ import annotations

import inspect
import re
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any

from tuiagent.backends.alignment import TokenAligner, estimate_tokens
from tuiagent.backends.base import BackendCrashed, ContextOverflow, GenerationStats
from tuiagent.backends.stops import StopMatcher
from tuiagent.backends.templates import NAMED_TEMPLATES, render_named
from tuiagent.config.spec import ModelSpec
from tuiagent.errors import ConfigError, UserError
from tuiagent.protocol import Determinism, Sampling, Token, TokenStream

TEMPLATES = (*NAMED_TEMPLATES, "hf")


class VLLMError(UserError):
    """vLLM is missing here, or its engine failed; the message says what to do."""


class VLLMBackend:
    """Streams tokens from a vLLM async engine (``AsyncLLM`` / ``AsyncLLMEngine``).

    ``engine`` is anything with vLLM's ``generate(prompt, sampling_params, request_id)`` async
    generator and ``abort(request_id)``; ``sampling_params`` builds the request's parameters
    (vLLM's ``SamplingParams``); ``delta_kind`` is ``RequestOutputKind.DELTA`` where vLLM has it
    (None: outputs are cumulative and diffed here); ``json_constraint`` turns a JSON schema into the
    SamplingParams fields that hold a generation to it (None: this vLLM has no structured outputs).
    ``create`` wires the real ones.
    """

    determinism: Determinism = "none"  # a request's numbers depend on what it is batched with

    def __init__(
        self,
        engine: Any,
        *,
        model_id: str,
        sampling_params: Callable[..., Any],
        delta_kind: Any = None,
        tokenizer: Any = None,
        chat_template: str = "hf",
        context_size: int = 4096,
        owns_engine: bool = False,
        json_constraint: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None,
    ):
        self.model_id = model_id
        self.engine = engine
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.context_size = int(context_size)
        self.stats = GenerationStats()
        self._sampling_params = sampling_params
        self._delta_kind = delta_kind
        self._owns_engine = owns_engine
        self._json_constraint = json_constraint

    # ------------------------------------------------------------ generation

    def sampling_params(
        self,
        sampling: Sampling,
        stop: Sequence[str],
        max_tokens: int | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Any:
        """vLLM SamplingParams for ``sampling``: sampled-token logprobs, stop strings, deltas, and the
        structured output ``schema`` asks for."""
        kwargs: dict[str, Any] = {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "repetition_penalty": sampling.repeat_penalty,
            "max_tokens": max_tokens if max_tokens is not None else sampling.max_tokens,
            "seed": sampling.seed,
            "stop": list(stop),
            "logprobs": 1,
        }
        if sampling.top_k and sampling.top_k > 0:
            kwargs["top_k"] = sampling.top_k
        if self._delta_kind is not None:
            kwargs["output_kind"] = self._delta_kind
        if schema is not None:
            if self._json_constraint is None:
                raise VLLMError(
                    f"this vLLM has no structured outputs, so {self.model_id!r} cannot hold a judge's reply to "
                    "JSON: upgrade vLLM (StructuredOutputsParams or GuidedDecodingParams), or judge without --judge-json"
                )
            kwargs.update(self._json_constraint(schema))
        return self._sampling_params(**kwargs)

    def _crashed(self, exc: Exception) -> BackendCrashed:
        return BackendCrashed(
            f"vLLM's engine process for {self.model_id!r} died while generating ({exc})\n"
            "  likely cause: a CUDA error or out of GPU memory (vLLM's log above says which)\n"
            "  fix: lower options.gpu_memory_utilization or context_size in models.toml, then load the model again"
        )

    def stream(self, prompt: str, sampling: Sampling, stop: Sequence[str]) -> TokenStream:
        """The sampled tokens until a stop string (not yielded), end of sequence or max_tokens."""
        return TokenStream(self._generate, prompt, sampling, stop)

    def stream_json(self, prompt: str, sampling: Sampling, schema: Mapping[str, Any]) -> TokenStream:
        """A generation held to the JSON schema ``schema`` (JsonReplies) by vLLM's structured outputs."""
        return TokenStream(self._generate, prompt, sampling, [], schema=schema)

    async def _generate(
        self,
        out: TokenStream,
        prompt: str,
        sampling: Sampling,
        stop: Sequence[str],
        schema: Mapping[str, Any] | None = None,
    ) -> AsyncGenerator[Token, None]:
        stops = [s for s in stop if s]
        max_tokens = sampling.max_tokens
        if self.tokenizer is not None:
            n_prompt = self.count_tokens(prompt)
            if n_prompt >= self.context_size:
                raise ContextOverflow(n_prompt, self.context_size, self.model_id)
            max_tokens = min(max_tokens, self.context_size - n_prompt)
        params = self.sampling_params(sampling, stops, max_tokens, schema)
        request_id = f"tuiagent-{uuid.uuid4().hex}"
        matcher = StopMatcher(stops)
        aligner = TokenAligner()
        self.stats.calls += 1
        started = time.perf_counter()
        finished = False
        finish_reason: str | None = None
        stop_reason: Any = None
        seen_text = seen_tokens = sampled = 0
        prompt_counted = False
        outputs = self.engine.generate(prompt, params, request_id)
        try:
            while not matcher.stopped and not finished:
                try:
                    output = await outputs.__anext__()
                except StopAsyncIteration:
                    break
                except ValueError as exc:
                    raise self._context_error(exc, prompt) from exc
                except Exception as exc:
                    if type(exc).__name__ == "EngineDeadError":  # vLLM's engine-core process died
                        finished = True  # nothing left to abort
                        raise self._crashed(exc) from exc
                    raise
                if not prompt_counted and getattr(output, "prompt_token_ids", None) is not None:
                    self._count_prompt(output)
                    prompt_counted = True
                completion = output.outputs[0]
                token_ids = list(completion.token_ids or ())
                logprobs = completion.logprobs
                text = completion.text or ""
                if self._delta_kind is None:  # cumulative outputs: take what is new
                    text, seen_text = text[seen_text:], len(text)
                    token_ids, seen_tokens = token_ids[seen_tokens:], len(token_ids)
                    logprobs = logprobs[len(logprobs) - len(token_ids) :] if logprobs else logprobs
                sampled += len(token_ids)
                names, values = self._sampled(token_ids, logprobs)
                tokens = aligner.feed(text, names, values)
                if output.finished or completion.finish_reason is not None:
                    finished = True
                    finish_reason, stop_reason = completion.finish_reason, completion.stop_reason
                    tokens += aligner.finish()
                for token in tokens:
                    for piece in matcher.feed(token):
                        yield piece
                    if matcher.stopped:
                        break
            if not matcher.stopped:
                for piece in matcher.flush():
                    yield piece
        finally:
            if not finished:
                await self._abort(request_id)
            await outputs.aclose()
            self.stats.generated_tokens += sampled
            self.stats.extra["seconds"] = self.stats.extra.get("seconds", 0.0) + time.perf_counter() - started
            if not prompt_counted:
                self._count_prompt(None, prompt)
        if finish_reason == "abort":
            raise VLLMError(f"vLLM aborted the request for model {self.model_id!r} (see its log)")
        if matcher.stopped:
            out.stop_reason = "stop"
        elif finish_reason == "length":
            out.stop_reason = "length"
        elif finish_reason == "stop" and isinstance(stop_reason, str):
            out.stop_reason = "stop"
        else:
            out.stop_reason = "eos"

    def _sampled(self, token_ids: list[int], logprobs: Any) -> tuple[list[str] | None, list[float | None]]:
        """Names and log-probabilities of the sampled tokens (the entry for each sampled id)."""
        if not token_ids:
            return [], []
        if not logprobs and self.tokenizer is None:
            return None, []
        names: list[str] = []
        values: list[float | None] = []
        for i, token_id in enumerate(token_ids):
            entry = None
            if logprobs is not None and i < len(logprobs) and logprobs[i] is not None:
                entry = logprobs[i].get(token_id)
            values.append(float(entry.logprob) if entry is not None else None)
            name = getattr(entry, "decoded_token", None) if entry is not None else None
            if name is None:
                name = self.tokenizer.decode([token_id]) if self.tokenizer is not None else ""
            names.append(name)
        return names, values

    def _count_prompt(self, output: Any, prompt: str | None = None) -> None:
        if output is not None:
            total = len(output.prompt_token_ids)
            cached = int(getattr(output, "num_cached_tokens", 0) or 0)
        else:
            total, cached = self.count_tokens(prompt or ""), 0
        self.stats.prompt_tokens_total += total
        self.stats.prompt_tokens_evaluated += max(total - cached, 0)

    async def _abort(self, request_id: str) -> None:
        result = self.engine.abort(request_id)
        if inspect.isawaitable(result):
            await result

    def _context_error(self, exc: ValueError, prompt: str) -> Exception:
        """vLLM's "prompt longer than the maximum model length" as a ContextOverflow."""
        m = re.search(r"\(length (\d+)\) is longer than the maximum model length of (\d+)", str(exc))
        if m:
            return ContextOverflow(int(m.group(1)), int(m.group(2)), self.model_id)
        if "maximum model length" in str(exc):
            return ContextOverflow(self.count_tokens(prompt), self.context_size, self.model_id)
        return exc

    # ------------------------------------------------------------ tokens and chat

    def count_tokens(self, text: str) -> int:
        """Exact count with the engine's own tokenizer (no special tokens added)."""
        if self.tokenizer is None:
            return estimate_tokens(text)
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def render_chat(self, messages: Sequence[dict[str, str]]) -> str:
        """``hf``: the model's own chat template (``tokenizer.apply_chat_template``); else a named one."""
        if self.chat_template == "hf":
            if self.tokenizer is None:
                raise VLLMError(f"model {self.model_id!r}: no tokenizer to render its chat template with")
            prompt: str = self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
            return prompt
        return render_named(self.chat_template, messages)

    async def aclose(self) -> None:
        if not self._owns_engine:
            return
        shutdown = getattr(self.engine, "shutdown", None) or getattr(self.engine, "shutdown_background_loop", None)
        if shutdown is not None:
            result = shutdown()
            if inspect.isawaitable(result):
                await result


# ---------------------------------------------------------------- building the real engine


def _engine_tokenizer(engine: Any) -> Any:
    """The engine's tokenizer where it is at hand without awaiting (None otherwise)."""
    tokenizer = getattr(engine, "tokenizer", None)
    if tokenizer is None:
        get = getattr(engine, "get_tokenizer", None)
        if get is not None and not inspect.iscoroutinefunction(get):
            try:
                tokenizer = get()
            except Exception:
                tokenizer = None
    if tokenizer is not None and not hasattr(tokenizer, "apply_chat_template"):
        tokenizer = getattr(tokenizer, "tokenizer", None)  # older vLLM: a TokenizerGroup around it
    return tokenizer


def _model_location(spec: ModelSpec, opts: dict[str, Any]) -> str:
    if opts.get("model"):
        return str(opts["model"])
    from tuiagent.config.sources import resolve_model_file

    path = resolve_model_file(spec)
    if path is None:
        raise ConfigError(
            f"model {spec.id!r} has no weights for vLLM to load",
            file=spec.origin,
            key=f"{_key(spec)}.source",
            fix='use kind = "path" (a model directory) or kind = "hub"',
        )
    return str(path)


def _key(spec: ModelSpec) -> str:
    from tuiagent.config.loader import toml_key

    return toml_key(spec.id)


def create(spec: ModelSpec, **options: Any) -> VLLMBackend:
    """Build vLLM's async engine for ``spec`` and a VLLMBackend over it."""
    opts = {**spec.options, **options}
    if spec.chat_template not in TEMPLATES:
        raise ConfigError(
            f"chat template {spec.chat_template!r} is not one the vllm backend renders",
            file=spec.origin,
            key=f"{_key(spec)}.chat_template",
            fix=f"use one of {sorted(TEMPLATES)}",
        )
    try:
        import vllm
        from vllm import AsyncEngineArgs, SamplingParams
    except ImportError as exc:
        raise VLLMError(
            f"model {spec.id!r} needs vLLM, which is not installed here ({exc}).\n"
            "  fix: pip install 'tuiagent[vllm]' on a machine with a CUDA GPU, or serve the model with "
            "`vllm serve` elsewhere and use the openai backend."
        ) from exc
    try:
        from vllm.sampling_params import RequestOutputKind

        delta_kind = RequestOutputKind.DELTA
    except ImportError:
        delta_kind = None
    json_constraint = _json_constraint()
    try:
        from vllm.v1.engine.async_llm import AsyncLLM as Engine
    except ImportError:
        Engine = vllm.AsyncLLMEngine

    model = _model_location(spec, opts)
    args: dict[str, Any] = {
        "model": model,
        "max_model_len": spec.context_size,
        "gpu_memory_utilization": float(opts.get("gpu_memory_utilization", 0.9)),
        "tensor_parallel_size": int(opts.get("tensor_parallel_size", 1)),
        "dtype": str(opts.get("dtype", "auto")),
    }
    args.update(opts.get("engine_args") or {})
    try:
        engine = Engine.from_engine_args(AsyncEngineArgs(**args))
    except (ValueError, RuntimeError, OSError) as exc:
        raise VLLMError(
            f"vLLM could not start model {spec.id!r} from {model}: {type(exc).__name__}: {exc}\n"
            "  check: a CUDA GPU with enough free memory (options.gpu_memory_utilization), "
            "context_size within what the model supports, and options.dtype."
        ) from exc
    tokenizer = _engine_tokenizer(engine)
    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model)
    return VLLMBackend(
        engine,
        model_id=spec.id,
        sampling_params=SamplingParams,
        delta_kind=delta_kind,
        tokenizer=tokenizer,
        chat_template=spec.chat_template,
        context_size=spec.context_size,
        owns_engine=True,
        json_constraint=json_constraint,
    )


def _json_constraint() -> Callable[[Mapping[str, Any]], dict[str, Any]] | None:
    """This vLLM's structured outputs for a JSON schema: ``structured_outputs`` (0.10.2 on; the only
    form from 0.12) or ``guided_decoding`` (before); None when it has neither."""
    try:
        from vllm.sampling_params import StructuredOutputsParams

        return lambda schema: {"structured_outputs": StructuredOutputsParams(json=dict(schema))}
    except ImportError:
        pass
    try:
        from vllm.sampling_params import GuidedDecodingParams

        return lambda schema: {"guided_decoding": GuidedDecodingParams(json=dict(schema))}
    except ImportError:
        return None
