"""Any OpenAI-compatible completions server (``vllm serve``, ``llama-server``, ``llama_cpp.server``).

The loop continues the assistant turn as raw text, so this backend streams from the *completions*
endpoint (never chat) with ``logprobs=1``. Stop strings are always checked here (``StopMatcher``;
servers differ in how they report them, option ``server_stop``), sampling options a server does
not know go in ``extra_body``, ``TokenAligner`` pairs the streamed text with the per-token report,
and server failures become a ``ModelServerError`` naming the URL and what to check (a
``ServerUnreachable`` when the server is gone). An entry with several ``base_urls`` is a
``backends.servers.ServerPool`` of these. The options and each server's quirks: docs/models.md
("openai"). The ``openai`` SDK is imported when a backend is created, not when this module is imported.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

from tuiagent.backends.alignment import TokenAligner, estimate_tokens
from tuiagent.backends.base import ContextOverflow, GenerationStats
from tuiagent.backends.llama_model import json_gbnf
from tuiagent.backends.servers import ModelServerError, ServerPool, ServerUnreachable
from tuiagent.backends.stops import StopMatcher
from tuiagent.backends.templates import NAMED_TEMPLATES, render_named
from tuiagent.config.loader import toml_key
from tuiagent.config.spec import ModelSpec
from tuiagent.errors import ConfigError
from tuiagent.protocol import Determinism, Sampling, Token, TokenStream

DEFAULT_TIMEOUT = 120.0
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_ENCODING = "cl100k_base"
SERVER_STOP_MODES = ("auto", "always", "never")


# ---------------------------------------------------------------- approximate token counts


class ApproxTokenCounter:
    """Counts tokens with a tiktoken encoding: an approximation of a server model's tokenizer.

    tiktoken downloads an encoding's data on first use; where that cannot happen (offline) and
    the data is not cached, it waits at most ``load_timeout`` seconds once and then falls back
    to ``estimate_tokens`` for good.
    """

    def __init__(self, encoding: str = DEFAULT_ENCODING, load_timeout: float = 5.0):
        self.encoding_name = encoding
        self.load_timeout = load_timeout
        self._encoding: Any = None
        self._loader: threading.Thread | None = None
        self._gave_up = False

    @property
    def exact_encoding(self) -> bool:
        """Whether counts come from the tiktoken encoding (else from ``estimate_tokens``)."""
        return self._get() is not None

    def __call__(self, text: str, *, wait: bool = True) -> int:
        """The count; with ``wait=False`` it never blocks on loading the encoding (it estimates meanwhile)."""
        encoding = self._get(wait)
        if encoding is None:
            return estimate_tokens(text)
        return len(encoding.encode(text, disallowed_special=()))

    def _get(self, wait: bool = True) -> Any:
        if self._encoding is not None or self._gave_up:
            return self._encoding
        if self._loader is None:
            self._loader = threading.Thread(target=self._load, name="tiktoken-load", daemon=True)
            self._loader.start()
            if wait:
                self._loader.join(self.load_timeout)
        if not self._loader.is_alive() and self._encoding is None:
            self._gave_up = True
        return self._encoding

    def _load(self) -> None:
        try:
            import tiktoken

            self._encoding = tiktoken.get_encoding(self.encoding_name)
        except Exception:  # offline without cached data, unknown name: estimate instead
            self._gave_up = True


# ---------------------------------------------------------------- the backend


class OpenAIBackend:
    """Streams completions from an OpenAI-compatible server; see the module docstring."""

    determinism: Determinism = "per-server"

    def __init__(
        self,
        *,
        model_id: str,
        base_url: str,
        served_model: str,
        api_key: str = "EMPTY",
        api_key_env: str | None = None,
        chat_template: str = "chatml",
        context_size: int = 4096,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_retries: int = 1,
        server_stop: str = "auto",
        logprobs: bool = True,
        extra_body: dict[str, Any] | None = None,
        tokenizer: str | None = None,
        client: Any = None,
    ):
        if server_stop not in SERVER_STOP_MODES:
            raise ValueError(f"server_stop must be one of {SERVER_STOP_MODES}, not {server_stop!r}")
        self.model_id = model_id
        self.base_url = base_url.rstrip("/")
        self.served_model = served_model
        self.api_key_env = api_key_env
        self.chat_template = chat_template
        self.context_size = int(context_size)
        self.timeout = float(timeout)
        self.server_stop = server_stop
        self.logprobs = logprobs
        self.extra_body = dict(extra_body or {})
        self.stats = GenerationStats()
        self.server_reports_stop_reason = False
        self._count = ApproxTokenCounter(tokenizer or DEFAULT_ENCODING)
        self._tokenize_route: tuple[str, str] | None = None
        if client is None:
            import openai

            client = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=api_key,
                timeout=openai.Timeout(self.timeout, connect=min(float(connect_timeout), self.timeout)),
                max_retries=int(max_retries),
            )
        self._client = client

    # ------------------------------------------------------------ generation

    def stream(self, prompt: str, sampling: Sampling, stop: Sequence[str]) -> TokenStream:
        """The sampled tokens until a stop string (not yielded), end of sequence or max_tokens."""
        return TokenStream(self._generate, prompt, sampling, stop)

    def stream_json(self, prompt: str, sampling: Sampling, schema: Mapping[str, Any]) -> TokenStream:
        """A reply held to the JSON schema ``schema`` by the server's structured outputs (JsonReplies;
        ``_request`` says which fields carry it)."""
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
        send_stops = self.server_stop == "always" or (self.server_stop == "auto" and self.server_reports_stop_reason)
        request = self._request(prompt, sampling, stops if send_stops else [], schema)
        matcher = StopMatcher(stops)
        aligner = TokenAligner()
        self.stats.calls += 1
        started = time.perf_counter()
        finish: str | None = None
        server_reason: Any = _MISSING
        usage: Any = None
        sampled = 0
        response = await self._open(request, prompt)
        try:
            while not matcher.stopped:
                try:
                    chunk = await response.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    raise self._translate(exc) from exc
                if getattr(chunk, "usage", None) is not None:
                    usage = chunk.usage
                for choice in chunk.choices or ():
                    if choice.index != 0:
                        continue
                    extra = choice.model_extra or {}
                    if "stop_reason" in extra:
                        self.server_reports_stop_reason = True
                        if extra["stop_reason"] is not None or choice.finish_reason:
                            server_reason = extra["stop_reason"]
                    text = choice.text or ""
                    report = choice.logprobs
                    if report is not None and report.tokens is not None:
                        tokens = aligner.feed(text, report.tokens, report.token_logprobs)
                        sampled += len(report.tokens)
                    else:
                        tokens = aligner.feed(text, None)
                        sampled += 1 if text else 0
                    if choice.finish_reason:
                        tokens += aligner.finish()
                    for token in tokens:
                        for piece in matcher.feed(token):
                            yield piece
                        if matcher.stopped:
                            break
                    if choice.finish_reason:
                        finish = choice.finish_reason
            if not matcher.stopped:
                if finish is None:  # the stream ended without saying why: find out
                    raise await self._unfinished(prompt)
                for piece in matcher.flush():
                    yield piece
        finally:
            await response.close()
            self._account(prompt, usage, sampled, time.perf_counter() - started)
        if matcher.stopped:
            out.stop_reason = "stop"
        elif finish == "length":
            out.stop_reason = "length"
        elif isinstance(server_reason, str) and server_reason in stops:
            out.stop_reason = "stop"
        else:
            out.stop_reason = "eos"

    async def _open(self, request: dict[str, Any], prompt: str) -> Any:
        """Start the streamed completion. A prompt that fits but leaves less room than
        ``max_tokens`` (vLLM rejects that) is retried once with the room that is left; one that
        does not fit at all is a ContextOverflow."""
        import openai

        for attempt in range(2):
            try:
                return await self._client.completions.create(**request)
            except openai.BadRequestError as exc:
                found = context_error(_message(exc))
                if found is None:
                    raise self._translate(exc) from exc
                context, prompt_tokens = found
                context = context or self.context_size
                if prompt_tokens is None:
                    prompt_tokens = self.count_tokens(prompt)
                room = context - prompt_tokens
                if attempt == 0 and room > 0 and request["max_tokens"] > room:
                    request = {**request, "max_tokens": room}
                    continue
                raise ContextOverflow(prompt_tokens, context, self.model_id) from exc
            except Exception as exc:
                raise self._translate(exc) from exc
        raise AssertionError("unreachable")

    async def _unfinished(self, prompt: str) -> Exception:
        """The error for a stream that ended without a finish reason.

        llama-cpp-python's server does this when the prompt does not fit its context: it has
        already answered 200 and just closes the stream (and may drop the next connection too).
        A server that died mid-stream does it as well: when the prompt fits and the server cannot
        be asked for its count, that is the error (``ServerUnreachable``).
        """
        gone: ServerUnreachable | None = None
        try:
            prompt_tokens = await self.count_tokens_exact(prompt)
        except ServerUnreachable as e:
            gone, prompt_tokens = e, None
        except ModelServerError:
            prompt_tokens = None
        if prompt_tokens is None:
            prompt_tokens = self.count_tokens(prompt)
        if prompt_tokens >= self.context_size:
            return ContextOverflow(prompt_tokens, self.context_size, self.model_id)
        if gone is not None:
            return gone
        return ModelServerError(
            f"the server at {self.base_url} ended the completion stream without a finish reason.\n"
            "  check the server's log: it may have failed on this request (a prompt longer than the "
            "context it was started with, e.g. llama_cpp.server --n_ctx, does this)."
        )

    def _request(
        self, prompt: str, sampling: Sampling, stops: list[str], schema: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The completions request; with ``schema``, in each server's field for it: ``response_format``
        (the OpenAI form, vLLM's), ``json_schema`` (llama-server's) and ``grammar`` (llama_cpp.server's,
        a GBNF grammar by llama-cpp-python's converter when it is installed). A server ignores the
        fields it does not know."""
        request: dict[str, Any] = {
            "model": self.served_model,
            "prompt": prompt,
            "stream": True,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "stream_options": {"include_usage": True},
        }
        if self.logprobs:
            request["logprobs"] = 1
        if sampling.seed is not None:
            request["seed"] = sampling.seed
        if stops:
            request["stop"] = stops
        extra: dict[str, Any] = {}
        if sampling.top_k and sampling.top_k > 0:
            extra["top_k"] = sampling.top_k
        if sampling.repeat_penalty != 1.0:
            extra["repeat_penalty"] = sampling.repeat_penalty  # llama.cpp's name
            extra["repetition_penalty"] = sampling.repeat_penalty  # vLLM's name
        if schema is not None:
            extra.update(_schema_fields(schema))
        extra.update(self.extra_body)
        if extra:
            request["extra_body"] = extra
        return request

    def _account(self, prompt: str, usage: Any, sampled: int, seconds: float) -> None:
        stats = self.stats
        if usage is not None and getattr(usage, "prompt_tokens", None) is not None:
            total = int(usage.prompt_tokens)
            details = getattr(usage, "prompt_tokens_details", None)
            cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
            stats.prompt_tokens_total += total
            stats.prompt_tokens_evaluated += max(total - cached, 0)
            stats.generated_tokens += int(getattr(usage, "completion_tokens", None) or sampled)
        else:  # the server sent no usage: count the prompt here (approximately, never blocking)
            n = self._count(prompt, wait=False)
            stats.prompt_tokens_total += n
            stats.prompt_tokens_evaluated += n
            stats.generated_tokens += sampled
            stats.extra["approx_prompt_counts"] = stats.extra.get("approx_prompt_counts", 0.0) + 1
        stats.extra["seconds"] = stats.extra.get("seconds", 0.0) + seconds

    # ------------------------------------------------------------ errors

    def _translate(self, exc: Exception) -> Exception:
        """An SDK error as a ModelServerError saying what to check; anything else unchanged."""
        import openai

        url = self.base_url
        if isinstance(exc, openai.APITimeoutError):
            return ServerUnreachable(
                f"the model server at {url} did not answer within {self.timeout:g} s.\n"
                "  check: is it overloaded or still loading the model? For long prompts raise "
                "options.timeout in models.toml."
            )
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            detail = f" ({type(cause).__name__}: {cause})" if cause else ""
            return ServerUnreachable(
                f"cannot reach the model server at {url}{detail}.\n"
                "  check: is the server running and listening on that host and port "
                "(e.g. `vllm serve MODEL --port 8000` or `python -m llama_cpp.server --model FILE.gguf`)? "
                "source.base_url in models.toml must be its address, usually ending in /v1."
            )
        if isinstance(exc, openai.NotFoundError):
            return ModelServerError(
                f"the server at {url} answered 404 (not found) for model {self.served_model!r}: {_message(exc)}\n"
                f"  check: source.served_model must be a name the server lists at {url}/models, and "
                "source.base_url must point at its OpenAI API root (usually ending in /v1)."
            )
        if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
            where = f"the environment variable {self.api_key_env}" if self.api_key_env else "source.api_key_env"
            return ModelServerError(
                f"the server at {url} refused the API key ({exc.status_code}): {_message(exc)}\n"
                f"  check: {where} must hold a key the server accepts."
            )
        if isinstance(exc, openai.APIStatusError):
            return ModelServerError(
                f"the server at {url} rejected the request ({exc.status_code}): {_message(exc)}\n"
                "  check: the prompt fits the model's context, and the sampling options are ones this server accepts."
            )
        if isinstance(exc, openai.APIError):
            return ModelServerError(f"the server at {url} reported an error while streaming: {_message(exc)}")
        return exc

    # ------------------------------------------------------------ tokens and chat

    def count_tokens(self, text: str) -> int:
        """Approximate token count, computed here without a round trip.

        Uses the tiktoken encoding named by ``spec.tokenizer`` (default ``cl100k_base``), which is
        not the served model's own tokenizer: counts are close for English and code but not
        exact. Without tiktoken's data (offline, not cached) it is a character-class estimate.
        Use ``count_tokens_exact`` where exactness is worth an HTTP request.
        """
        return self._count(text)

    async def count_tokens_exact(self, text: str) -> int | None:
        """The served model's own token count, from the server's tokenize endpoint (one HTTP call).

        Tries vLLM's ``POST /tokenize``, llama-cpp-python's ``POST /extras/tokenize/count`` and
        llama.cpp's ``POST /tokenize`` (all at the server root, beside /v1) and remembers the one
        that answers; None when the server has none of them.
        """
        import openai

        root = re.sub(r"/v1$", "", self.base_url)
        routes = [
            ("vllm", f"{root}/tokenize"),
            ("llama_cpp_python", f"{root}/extras/tokenize/count"),
            ("llama_cpp", f"{root}/tokenize"),
        ]
        if self._tokenize_route is not None:
            routes = [self._tokenize_route]
        for kind, url in routes:
            bodies: dict[str, dict[str, Any]] = {
                "vllm": {"model": self.served_model, "prompt": text, "add_special_tokens": False},
                "llama_cpp_python": {"input": text},
                "llama_cpp": {"content": text},
            }
            body = bodies[kind]
            try:
                answer = await self._client.post(url, cast_to=object, body=body)
            except (openai.APIStatusError, openai.APIResponseValidationError):
                continue
            except Exception as exc:
                raise self._translate(exc) from exc
            count = _count_from(answer)
            if count is not None:
                self._tokenize_route = (kind, url)
                return count
        return None

    def render_chat(self, messages: Sequence[dict[str, str]]) -> str:
        """Render with the named template (``chatml`` or ``raw``), ending with an open assistant turn."""
        return render_named(self.chat_template, messages)

    async def aclose(self) -> None:
        await self._client.close()


_MISSING = object()


def _schema_fields(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The request fields that hold a completion to ``schema`` on each kind of server (see ``_request``)."""
    fields: dict[str, Any] = {
        "response_format": {"type": "json_schema", "json_schema": {"name": "reply", "schema": dict(schema)}},
        "json_schema": dict(schema),
    }
    try:
        fields["grammar"] = json_gbnf(json.dumps(schema))
    except ImportError:  # a client machine without llama-cpp-python: the other two fields remain
        pass
    return fields


def _message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(detail := body.get("detail"), str):
            return detail
        if isinstance(inner, str):
            return inner
    return getattr(exc, "message", None) or str(exc)


_CONTEXT_SIZE = (r"maximum context length is (\d+)", r"context window of (\d+)", r"context length of (\d+)")
_PROMPT_TOKENS = (
    r"request has (\d+) input tokens",
    r"(\d+) input tokens",
    r"\((\d+) in the (?:messages|prompt)",
    r"Requested tokens \((\d+)\)",
    r"prompt (?:has|contains|is) (\d+) tokens",
)


def context_error(message: str) -> tuple[int | None, int | None] | None:
    """(context size, prompt tokens) from a server's "prompt too long" message, None if it is not one.

    Knows vLLM's ("This model's maximum context length is 2048 tokens. However, your request has
    3000 input tokens ...", and the older "... you requested 3100 tokens (3000 in the messages,
    100 in the completion)") and llama-cpp-python's ("Requested tokens (3000) exceed context
    window of 2048"); either number may be missing.
    """
    if "context" not in message.lower():
        return None
    found = [
        next((int(m.group(1)) for p in pats if (m := re.search(p, message, re.I))), None)
        for pats in (_CONTEXT_SIZE, _PROMPT_TOKENS)
    ]
    if found == [None, None]:
        return None
    return found[0], found[1]


def _count_from(answer: Any) -> int | None:
    if isinstance(answer, dict):
        if isinstance(count := answer.get("count"), int):
            return count
        if isinstance(answer.get("tokens"), list):
            return len(answer["tokens"])
    return None


def create(spec: ModelSpec, **options: Any) -> OpenAIBackend | ServerPool:
    """An OpenAIBackend for ``spec`` (source kind "server"), a ServerPool of them when it names
    several ``base_urls``; ``options`` override ``spec.options``."""
    opts = {**spec.options, **options}
    src = spec.source
    key = toml_key(spec.id)
    if src.kind != "server" or not src.servers:
        raise ConfigError(
            f"model {spec.id!r} uses the openai backend but has no server address",
            file=spec.origin,
            key=f"{key}.source",
            fix='set kind = "server" and base_url = "http://HOST:PORT/v1"',
        )
    if spec.chat_template not in NAMED_TEMPLATES:
        raise ConfigError(
            f"chat template {spec.chat_template!r} cannot be rendered for a server model",
            file=spec.origin,
            key=f"{key}.chat_template",
            fix=f"use one of {sorted(NAMED_TEMPLATES)}",
        )
    server_stop = str(opts.get("server_stop", "auto"))
    if server_stop not in SERVER_STOP_MODES:
        raise ConfigError(
            f"options.server_stop is {server_stop!r}",
            file=spec.origin,
            key=f"{key}.options.server_stop",
            fix=f"use one of {list(SERVER_STOP_MODES)}",
        )
    extra_body = opts.get("extra_body") or {}
    if not isinstance(extra_body, dict):
        raise ConfigError(
            "options.extra_body must be a table",
            file=spec.origin,
            key=f"{key}.options.extra_body",
            fix="e.g. extra_body = { repeat_penalty = 1.0 }",
        )
    api_key = (os.environ.get(src.api_key_env) if src.api_key_env else None) or "EMPTY"
    timeout = float(opts.get("timeout", DEFAULT_TIMEOUT))
    if not math.isfinite(timeout) or timeout <= 0:
        raise ConfigError(
            f"options.timeout is {timeout!r}", file=spec.origin, key=f"{key}.options.timeout", fix="give seconds > 0"
        )
    servers = [
        OpenAIBackend(
            model_id=spec.id,
            base_url=url,
            served_model=src.served_model or spec.id,
            api_key=api_key,
            api_key_env=src.api_key_env,
            chat_template=spec.chat_template,
            context_size=spec.context_size,
            timeout=timeout,
            connect_timeout=float(opts.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT)),
            max_retries=int(opts.get("max_retries", 1)),
            server_stop=server_stop,
            logprobs=bool(opts.get("logprobs", True)),
            extra_body=extra_body,
            tokenizer=opts.get("tokenizer") or spec.tokenizer,
            client=opts.get("client"),
        )
        for url in src.servers
    ]
    return servers[0] if len(servers) == 1 else ServerPool(servers)
