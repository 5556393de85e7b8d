"""The judge: a models.toml model asked short questions outside a run, in a fresh chat, greedy.

``ask`` is one question to an open backend (the necessity guard's model judge goes through it).
``JudgeModels`` opens each judge model once, on first use, and shares it: concurrent first uses wait
for the one load. ``Judge`` puts a registered prompt (``core.judge_prompts``) to one judge model:
single questions and pairwise comparisons (both orders), strict parsing with the unparseable
counted, a cache (``core.judge_store``) and the cost in tokens and seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuiagent.backends import open_backend
from tuiagent.backends.base import Backend
from tuiagent.config.loader import load_models
from tuiagent.config.spec import ModelSpec
from tuiagent.core.judge_prompts import UNPARSEABLE, JudgePrompt
from tuiagent.core.judge_store import JudgementStore, judgement_key
from tuiagent.protocol import JudgeReply, Sampling, TokenLP


async def ask(backend: Backend, question: str, max_tokens: int = 3) -> JudgeReply:
    """The model's greedy reply to ``question`` in a fresh chat, with every token's log-probability.
    On the run's own backend this costs the prefix cache: the next turn re-evaluates its prompt."""
    prompt = backend.render_chat([{"role": "user", "content": question}])
    async with backend.stream(prompt, Sampling(temperature=0.0, max_tokens=max_tokens), []) as stream:
        tokens = tuple([TokenLP(t.text, t.logprob) async for t in stream])
    return JudgeReply("".join(t.text for t in tokens), tokens, backend.model_id)


class JudgeModels:
    """Judge models by models.toml id, each opened once on first use (in a worker thread: loading a
    local model takes seconds) and shared until ``aclose``; a lock per id makes concurrent first uses
    wait for one load. ``opener`` (a spec to a backend) replaces ``open_backend`` in tests."""

    def __init__(self, models_file: Path | None = None, opener: Callable[[ModelSpec], Backend] | None = None):
        self.models_file = models_file
        self.opener = opener or open_backend
        self.opened: dict[str, Backend] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def spec(self, model_id: str) -> ModelSpec:
        """The models.toml entry ``model_id``; an unknown id raises ConfigError (say it at start)."""
        return load_models(self.models_file).get(model_id)

    async def __call__(self, model_id: str) -> Backend:
        lock = self._locks.setdefault(model_id, asyncio.Lock())
        async with lock:
            if model_id not in self.opened:
                self.opened[model_id] = await asyncio.to_thread(self.opener, self.spec(model_id))
        return self.opened[model_id]

    async def aclose(self) -> None:
        opened, self.opened = list(self.opened.values()), {}
        for backend in opened:
            await backend.aclose()


@dataclass
class JudgeCost:
    """What one judge's questions cost: asked (not cached) and cached calls, tokens, seconds, and the
    replies each prompt could not parse."""

    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    unparseable: dict[str, int] = field(default_factory=dict)
    judged: dict[str, int] = field(default_factory=dict)

    def add(self, record: dict[str, Any], *, cached: bool) -> None:
        pid = record["prompt"]
        self.judged[pid] = self.judged.get(pid, 0) + 1
        if record["value"] == UNPARSEABLE:
            self.unparseable[pid] = self.unparseable.get(pid, 0) + 1
        if cached:
            self.cached += 1
            return
        self.calls += 1
        self.prompt_tokens += record["prompt_tokens"]
        self.generated_tokens += record["generated_tokens"]
        self.seconds += record["seconds"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "cached": self.cached,
            "prompt_tokens": self.prompt_tokens,
            "generated_tokens": self.generated_tokens,
            "seconds": round(self.seconds, 3),
            "judged": dict(self.judged),
            "unparseable": dict(self.unparseable),
        }


@dataclass(frozen=True)
class PairJudgement:
    """A pairwise comparison asked in both orders. ``winner``: "first" or "second" when both orders
    agree, "inconsistent" when each order prefers the solution in the same position (position bias),
    UNPARSEABLE when either reply was. ``orders``: the raw value of each order ("A", "B" or UNPARSEABLE),
    the first with ``first`` as A."""

    winner: str
    orders: tuple[Any, Any]


def pair_winner(orders: tuple[Any, Any]) -> str:
    """The winner of a comparison from its two orders' values (see PairJudgement)."""
    straight, swapped = orders
    if UNPARSEABLE in (straight, swapped):
        return UNPARSEABLE
    if straight == "A" and swapped == "B":
        return "first"
    if straight == "B" and swapped == "A":
        return "second"
    return "inconsistent"


class Judge:
    """One judge model with its cache and cost: ``backend``, an open one, or ``models`` to open
    ``model_id`` from on first use; ``store``: the cache (None: no cache). Calls on one judge go one
    at a time (a local model serves one sequence)."""

    def __init__(
        self,
        model_id: str,
        *,
        backend: Backend | None = None,
        models: JudgeModels | None = None,
        store: JudgementStore | None = None,
    ):
        if (backend is None) == (models is None):
            raise ValueError("a Judge takes an open backend or the JudgeModels to open it from, not both")
        self.model_id = model_id
        self._backend = backend
        self._models = models
        self.store = store
        self.cost = JudgeCost()
        self._lock = asyncio.Lock()

    async def backend(self) -> Backend:
        if self._backend is None:
            assert self._models is not None
            self._backend = await self._models(self.model_id)
        return self._backend

    async def reply(self, question: str, max_tokens: int) -> JudgeReply:
        """An uncached question (the necessity guard's and the calibration's), counted in the cost."""
        async with self._lock:
            backend = await self.backend()
            t0 = time.monotonic()
            reply = await ask(backend, question, max_tokens)
            self.cost.calls += 1
            self.cost.seconds += time.monotonic() - t0
            self.cost.prompt_tokens += backend.count_tokens(question)
            self.cost.generated_tokens += len(reply.tokens)
        return reply

    async def single(self, prompt: JudgePrompt, **inputs: str) -> Any:
        """The parsed value of ``prompt`` on ``inputs`` (or UNPARSEABLE), from the cache when it holds it."""
        return (await self.judgement(prompt, inputs))["value"]

    async def pairwise(self, prompt: JudgePrompt, first: str, second: str, **inputs: str) -> PairJudgement:
        """``first`` against ``second`` in both orders (first as A, then first as B)."""
        if prompt.pair is None:
            raise ValueError(f"judge prompt {prompt.id!r} is not pairwise")
        a, b = prompt.pair
        straight = await self.single(prompt, **inputs, **{a: first, b: second})
        swapped = await self.single(prompt, **inputs, **{a: second, b: first})
        return PairJudgement(pair_winner((straight, swapped)), (straight, swapped))

    async def judgement(self, prompt: JudgePrompt, inputs: dict[str, str]) -> dict[str, Any]:
        """The whole cached record of one judgement: key, prompt, inputs, reply, value, cost."""
        question = prompt.render(**inputs)
        key = judgement_key(self.model_id, prompt.id, prompt.version, inputs)
        cached = self.store.get(key) if self.store is not None else None
        if cached is not None:
            self.cost.add(cached, cached=True)
            return cached
        async with self._lock:
            backend = await self.backend()
            t0 = time.monotonic()
            reply = await ask(backend, question, prompt.max_tokens)
            seconds = time.monotonic() - t0
            prompt_tokens = backend.count_tokens(question)
        record = {
            "key": key,
            "judge": self.model_id,
            "answered_by": reply.model,
            "prompt": prompt.id,
            "version": prompt.version,
            "inputs": inputs,
            "reply": reply.text,
            "tokens": [[t.text, t.logprob] for t in reply.tokens],
            "value": prompt.parse(reply),
            "prompt_tokens": prompt_tokens,
            "generated_tokens": len(reply.tokens),
            "seconds": round(seconds, 3),
        }
        if self.store is not None:
            self.store.append(record)
        self.cost.add(record, cached=False)
        return record
