"""One model behind several OpenAI-compatible servers (``base_urls`` in models.toml).

Each run is pinned to one server (``ServerPool.session``): its turns go there and reuse that
server's prefix cache. A new run goes to the server with the fewest runs open, ties to the one
listed first. A server whose request fails with ``ServerUnreachable`` is taken out for the rest
of the pool's life, and the run sees ``BackendCrashed`` saying so; while
``serving()`` is not 0, the eval starts that run again from scratch on another server. Recipes
and what stays exact across servers: docs/scaling.md.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, Protocol

from tuiagent.backends.base import BackendCrashed, GenerationStats
from tuiagent.errors import UserError
from tuiagent.protocol import Determinism, Sampling, Token, TokenStream


class ModelServerError(UserError):
    """The model server could not be reached or refused the request; the message says what to check."""


class ServerUnreachable(ModelServerError):
    """The server is gone (connection refused or dropped, no answer in time): another may serve."""


class Server(Protocol):
    """What the pool needs of one server's backend (``backends.openai.OpenAIBackend``)."""

    model_id: str
    base_url: str
    stats: GenerationStats

    def stream(self, prompt: str, sampling: Sampling, stop: Sequence[str]) -> TokenStream: ...

    def stream_json(self, prompt: str, sampling: Sampling, schema: Mapping[str, Any]) -> TokenStream: ...

    def count_tokens(self, text: str) -> int: ...

    def render_chat(self, messages: Sequence[dict[str, str]]) -> str: ...

    async def aclose(self) -> None: ...


class ServerPool:
    """Several servers of one model; see the module docstring."""

    determinism: Determinism = "per-server"

    def __init__(self, servers: Sequence[Server]):
        if not servers:
            raise ValueError("a server pool needs at least one server")
        self.servers = list(servers)
        self.model_id = self.servers[0].model_id
        self.open = {s.base_url: 0 for s in self.servers}  # runs pinned to each server now
        self.down: dict[str, str] = {}  # base_url -> why it was taken out
        self._default: ServerSession | None = None  # for calls outside a session (solve, the app)

    @property
    def stats(self) -> GenerationStats:
        total = GenerationStats()
        for s in self.servers:
            total.prompt_tokens_evaluated += s.stats.prompt_tokens_evaluated
            total.prompt_tokens_total += s.stats.prompt_tokens_total
            total.generated_tokens += s.stats.generated_tokens
            total.calls += s.stats.calls
        return total

    def serving(self) -> int:
        """How many servers are still in the pool."""
        return len(self.servers) - len(self.down)

    def session(self) -> ServerSession:
        """This pool for one run, pinned to the least loaded server still serving."""
        live = [s for s in self.servers if s.base_url not in self.down]
        if not live:
            raise self._none_left()
        server = min(live, key=lambda s: self.open[s.base_url])
        self.open[server.base_url] += 1
        return ServerSession(self, server)

    def take_out(self, server: Server, error: Exception) -> BackendCrashed:
        """Take ``server`` out (once); the error the run ends with, saying so."""
        why = str(error).splitlines()[0]
        self.down.setdefault(server.base_url, why)
        return BackendCrashed(
            f"the server at {server.base_url} failed and is taken out ({why}); "
            f"{self.serving()} of {len(self.servers)} still serving"
        )

    def _none_left(self) -> BackendCrashed:
        failures = "; ".join(f"{url}: {why}" for url, why in self.down.items())
        return BackendCrashed(
            f"every server of model {self.model_id!r} failed ({failures})\n"
            "  check the servers' logs, start them again, and rerun (the eval resumes)"
        )

    def stream(self, prompt: str, sampling: Sampling, stop: Sequence[str]) -> TokenStream:
        """Outside a session: every call on one pinned server (moved on when that one fails)."""
        return self._pinned().stream(prompt, sampling, stop)

    def stream_json(self, prompt: str, sampling: Sampling, schema: Mapping[str, Any]) -> TokenStream:
        """A judge's reply held to ``schema`` (JsonReplies), outside a session as ``stream``."""
        return self._pinned().stream_json(prompt, sampling, schema)

    def _pinned(self) -> ServerSession:
        if self._default is None or self._default.server.base_url in self.down:
            self._default = self.session()
        return self._default

    def count_tokens(self, text: str) -> int:
        return self.servers[0].count_tokens(text)

    def render_chat(self, messages: Sequence[dict[str, str]]) -> str:
        return self.servers[0].render_chat(messages)

    async def aclose(self) -> None:
        for s in self.servers:
            await s.aclose()


class ServerSession:
    """A ``ServerPool`` as one run sees it: every call on one server; ``aclose`` ends the session."""

    determinism: Determinism = "per-server"

    def __init__(self, pool: ServerPool, server: Server):
        self.pool, self.server = pool, server
        self.model_id, self.base_url = server.model_id, server.base_url
        self._closed = False

    @property
    def stats(self) -> GenerationStats:
        return self.server.stats

    def stream(self, prompt: str, sampling: Sampling, stop: Sequence[str]) -> TokenStream:
        return TokenStream(self._relay, prompt, sampling, stop)

    def stream_json(self, prompt: str, sampling: Sampling, schema: Mapping[str, Any]) -> TokenStream:
        return TokenStream(self._relay, prompt, sampling, [], schema=schema)

    async def _relay(
        self,
        out: TokenStream,
        prompt: str,
        sampling: Sampling,
        stop: Sequence[str],
        schema: Mapping[str, Any] | None = None,
    ) -> AsyncGenerator[Token, None]:
        if self.base_url in self.pool.down:  # taken out since this run's last turn
            raise BackendCrashed(f"the server at {self.base_url} was taken out ({self.pool.down[self.base_url]})")
        inner = (
            self.server.stream(prompt, sampling, stop)
            if schema is None
            else self.server.stream_json(prompt, sampling, schema)
        )
        try:
            async for token in inner:
                yield token
        except ServerUnreachable as e:
            raise self.pool.take_out(self.server, e) from e
        finally:
            await inner.aclose()
        out.stop_reason = inner.stop_reason

    def count_tokens(self, text: str) -> int:
        return self.server.count_tokens(text)

    def render_chat(self, messages: Sequence[dict[str, str]]) -> str:
        return self.server.render_chat(messages)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self.pool.open[self.base_url] -= 1
