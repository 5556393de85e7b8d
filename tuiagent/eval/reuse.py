"""Reusing identical generations across the settings of an eval.

Runs are bit-exact, so on one engine a generation is a function of its prompt, sampling, stop
strings and the calls its run made before it: settings whose guards only watch generate what
``none`` generates, and an acting guard the same until it first acts. ``GenerationMemo`` keeps
each generation once (``generations.jsonl`` in the eval's directory, so a resumed eval reuses it
too); ``ReusingBackend`` serves one run from it and, at the first unknown call, decodes the run's
reused calls again with their ids forced (checking their logprobs) before generating. Details:
docs/evaluating.md ("Reused generations").
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from tuiagent.core.jsonl_store import JsonlAppender, read_jsonl
from tuiagent.protocol import Sampling, StopReason, Token, TokenStream

GENERATIONS = "generations.jsonl"
CLEAN_ENDS = ("stop", "eos", "length")


@dataclass(frozen=True)
class Generated:
    """One generation as the run saw it."""

    tokens: tuple[tuple[str, float | None], ...]  # (text, logprob) as streamed
    ids: tuple[int, ...]  # every sampled id (what a replay forces)
    reason: StopReason
    seconds: float  # how long generating it took

    def to_json(self, key: str) -> dict[str, Any]:
        return {
            "key": key,
            "tokens": self.tokens,
            "ids": self.ids,
            "reason": self.reason,
            "seconds": round(self.seconds, 3),
        }

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Generated:
        return cls(
            tuple((str(t), None if lp is None else float(lp)) for t, lp in record["tokens"]),
            tuple(int(i) for i in record["ids"]),
            cast(StopReason, str(record["reason"])),  # what to_json wrote from a stream's stop_reason
            float(record["seconds"]),
        )


class GenerationMemo:
    """Generations by key, kept in ``<eval dir>/generations.jsonl`` (``core.jsonl_store``: a line cut
    short by a kill is skipped), each held once in memory, as a ``Generated``."""

    def __init__(self, directory: Path):
        path = Path(directory) / GENERATIONS
        self._file = JsonlAppender(path, key="key")
        self._entries: dict[str, Generated] = {}
        self._lock = threading.Lock()
        for record in read_jsonl(path, key="key")[0]:
            with contextlib.suppress(KeyError, TypeError, ValueError):  # a record of another shape: generated again
                self._entries[record["key"]] = Generated.from_json(record)

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def key(engine: str, history: str, prompt: str, sampling: Sampling, stop: Sequence[str]) -> str:
        what = json.dumps([engine, history, prompt, asdict(sampling), list(stop)], sort_keys=True)
        return hashlib.sha256(what.encode()).hexdigest()

    def get(self, key: str) -> Generated | None:
        return self._entries.get(key)

    def put(self, key: str, generated: Generated) -> None:
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = generated
        self._file.append(generated.to_json(key))

    def close(self) -> None:
        self._file.close()


class ReusingBackend:
    """One run's view of the shared backend, reusing identical generations (module docstring)."""

    def __init__(self, backend: Any, memo: GenerationMemo):
        self.backend, self.memo = backend, memo
        self.engine: str = backend.engine
        self.history = ""  # digest of the run's calls so far: part of every key
        self.pending: list[tuple[str, Generated, list[str]]] = []  # reused, not yet decoded by the model
        self.reusing = True
        self.reused_turns = 0
        self.reused_s = 0.0
        self.replayed_turns = 0
        self.mismatched = False

    def __getattr__(self, name: str) -> Any:  # model_id, count_tokens, render_chat, stats, ...
        return getattr(self.backend, name)

    def stream(self, prompt: str, sampling: Sampling, stop: Sequence[str]) -> TokenStream:
        return TokenStream(self._produce, prompt, sampling, list(stop))

    async def _produce(
        self, out: TokenStream, prompt: str, sampling: Sampling, stop: list[str]
    ) -> AsyncGenerator[Token, None]:
        key = self.memo.key(self.engine, self.history, prompt, sampling, stop)
        known = self.memo.get(key) if self.reusing else None
        if known is not None:
            for text, logprob in known.tokens:
                yield Token(text, logprob)
            out.stop_reason, out.token_ids, out.layout = known.reason, list(known.ids), "reused"
            self.pending.append((prompt, known, stop))
            self.reused_turns += 1
            self.reused_s += known.seconds
            self._advance(key, known)
            return
        if self.pending:
            await self._catch_up()
        started = time.perf_counter()
        tokens: list[tuple[str, float | None]] = []
        self.reusing, reusing = False, self.reusing  # until it ends cleanly
        async with self.backend.stream(prompt, sampling, stop) as inner:
            async for token in inner:
                tokens.append((token.text, token.logprob))
                yield token
        out.stop_reason, out.token_ids, out.layout = inner.stop_reason, inner.token_ids, inner.layout
        if inner.stop_reason not in CLEAN_ENDS or inner.token_ids is None:
            return
        generated = Generated(tuple(tokens), tuple(inner.token_ids), inner.stop_reason, time.perf_counter() - started)
        if reusing:
            self.memo.put(key, generated)
            self.reusing = True
        self._advance(key, generated)

    def _advance(self, key: str, generated: Generated) -> None:
        self.history = hashlib.sha256(f"{key}:{list(generated.ids)}".encode()).hexdigest()

    async def _catch_up(self) -> None:
        """Decode the reused calls again, ids forced, so the model holds what the run would have left."""
        pending, self.pending = self.pending, []
        for prompt, known, stop in pending:
            got: list[tuple[str, float | None]] = []
            try:
                async with self.backend.replay(prompt, known.ids, stop) as replay:
                    async for token in replay:
                        got.append((token.text, token.logprob))
            except BaseException:
                self.reusing = False
                raise
            self.replayed_turns += 1
            if tuple(got) != known.tokens:
                self.mismatched, self.reusing = True, False
                return
