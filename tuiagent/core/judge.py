"""The judge: a models.toml model asked short questions outside a run, in a fresh chat, greedy.

``ask`` is one question to an open backend (the necessity guard's model judge goes through it).
``JudgeModels`` opens each judge model once, on first use, and shares it: concurrent first uses wait
for the one load. ``Judge`` puts a registered prompt (``core.judge_prompts``) to one judge model:
single questions and pairwise comparisons (both orders), strict parsing with the unparseable
counted, a cache (``core.judge_store``) and the cost in tokens and seconds. A judge named
``MODEL+json`` (``judge_name``; ``tuiagent eval --judge-json``) has its replies to the prompts that ask
for JSON held to their schemas (``core.judge_schemas``), on backends with structured outputs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuiagent.backends import BATCHED_BACKENDS, open_backend
from tuiagent.backends.base import Backend, JsonReplies
from tuiagent.config.loader import load_models
from tuiagent.config.spec import ModelSpec
from tuiagent.core.judge_prompts import UNPARSEABLE, JudgePrompt
from tuiagent.core.judge_schemas import Schema
from tuiagent.core.judge_store import JudgementStore, judgement_key
from tuiagent.errors import UserError
from tuiagent.protocol import JudgeReply, Sampling, TokenLP

JSON_MARK = "+json"


def judge_name(model_id: str, json_replies: bool) -> str:
    """A judge's name in an eval's manifest and its judgements' keys: its models.toml id, and
    ``+json`` when its replies are held to the prompts' schemas (other judgements: asked again)."""
    return model_id + JSON_MARK if json_replies else model_id


def judge_model(name: str) -> tuple[str, bool]:
    """(the models.toml id, whether replies are held to JSON) of a judge's name."""
    return (name.removesuffix(JSON_MARK), True) if name.endswith(JSON_MARK) else (name, False)


def answering(judge: str, prompt: JudgePrompt) -> str:
    """Who answers ``prompt`` for judge ``judge``, as its judgements record it: a prompt without a
    schema is asked the same either way, so the model alone."""
    model, constrained = judge_model(judge)
    return judge if constrained and prompt.schema else model


def key_of(judge: str, prompt: JudgePrompt, inputs: dict[str, str]) -> str:
    """The cache key of judge ``judge``'s judgement of ``prompt`` on ``inputs``."""
    return judgement_key(answering(judge, prompt), prompt.id, prompt.version, inputs)


async def ask(backend: Backend, question: str, max_tokens: int = 3, schema: Schema | None = None) -> JudgeReply:
    """The model's greedy reply to ``question`` in a fresh chat, with every token's log-probability;
    with ``schema``, held to that JSON schema (a backend without structured outputs is a UserError).
    On the run's own backend this costs the prefix cache: the next turn re-evaluates its prompt."""
    prompt = backend.render_chat([{"role": "user", "content": question}])
    sampling = Sampling(temperature=0.0, max_tokens=max_tokens)
    if schema is None:
        stream = backend.stream(prompt, sampling, [])
    elif isinstance(backend, JsonReplies):
        stream = backend.stream_json(prompt, sampling, schema)
    else:
        raise UserError(
            f"model {backend.model_id!r}'s backend cannot hold a reply to a JSON schema (no structured outputs); "
            "judge without --judge-json"
        )
    async with stream:
        tokens = tuple([TokenLP(t.text, t.logprob) async for t in stream])
    return JudgeReply("".join(t.text for t in tokens), tokens, backend.model_id)


class JudgeModels:
    """Judge models by models.toml id, each opened once on first use (in a worker thread: loading a
    local model takes seconds) and shared until ``aclose``; a lock per id makes concurrent first uses
    wait for one load. ``concurrency``: judgements in flight on each judge (a local llama.cpp judge is
    then loaded as the batched engine with that many sequences; a server or vLLM batches them itself).
    ``opener`` (a spec to a backend) replaces ``open_backend`` in tests."""

    def __init__(
        self,
        models_file: Path | None = None,
        opener: Callable[..., Backend] | None = None,
        *,
        concurrency: int = 1,
    ):
        self.models_file = models_file
        self.opener: Callable[..., Backend] = opener or open_backend
        self.concurrency = max(1, int(concurrency))
        self.opened: dict[str, Backend] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def spec(self, model_id: str) -> ModelSpec:
        """The models.toml entry ``model_id``; an unknown id raises ConfigError (say it at start)."""
        return load_models(self.models_file).get(model_id)

    async def __call__(self, model_id: str) -> Backend:
        lock = self._locks.setdefault(model_id, asyncio.Lock())
        async with lock:
            if model_id not in self.opened:
                spec = self.spec(model_id)
                batched = (
                    {"n_seq": self.concurrency} if self.concurrency > 1 and spec.backend in BATCHED_BACKENDS else {}
                )
                self.opened[model_id] = await asyncio.to_thread(self.opener, spec, **batched)
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
    """One judge with its cache and cost: ``name`` (see ``judge_name``), ``backend``, an open one, or
    ``models`` to open its model from on first use; ``store``: the cache (None: no cache). At most
    ``concurrency`` calls are in flight (default: ``models``' concurrency, else one), started in the
    order they were asked."""

    def __init__(
        self,
        name: str,
        *,
        backend: Backend | None = None,
        models: JudgeModels | None = None,
        store: JudgementStore | None = None,
        concurrency: int | None = None,
    ):
        if (backend is None) == (models is None):
            raise ValueError("a Judge takes an open backend or the JudgeModels to open it from, not both")
        self.name = name
        self.model_id, self.json_replies = judge_model(name)
        self._backend = backend
        self._models = models
        self.store = store
        self.cost = JudgeCost()
        width = concurrency if concurrency is not None else models.concurrency if models is not None else 1
        self._slots = asyncio.Semaphore(max(1, width))
        self._asking: dict[str, asyncio.Event] = {}  # questions in flight, by key

    async def backend(self) -> Backend:
        if self._backend is None:
            assert self._models is not None
            self._backend = await self._models(self.model_id)
        return self._backend

    async def reply(self, question: str, max_tokens: int) -> JudgeReply:
        """An uncached question (the necessity guard's and the calibration's), counted in the cost."""
        async with self._slots:
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

    async def judgements(self, items: Iterable[tuple[JudgePrompt, dict[str, str]]]) -> list[dict[str, Any]]:
        """Every judgement of ``items`` (see ``judgement``), ``concurrency`` in flight, started in order."""
        return list(await asyncio.gather(*(self.judgement(p, inputs) for p, inputs in items)))

    async def judgement(self, prompt: JudgePrompt, inputs: dict[str, str]) -> dict[str, Any]:
        """The whole cached record of one judgement: key, prompt, inputs, reply, value, cost."""
        question = prompt.render(**inputs)
        key = key_of(self.name, prompt, inputs)
        schema = prompt.schema if self.json_replies else None
        while True:
            cached = self.store.get(key) if self.store is not None else None
            if cached is not None:
                self.cost.add(cached, cached=True)
                return cached
            if key not in self._asking:
                break
            await self._asking[key].wait()  # the same question is in flight: its answer is cached next
        self._asking[key] = asyncio.Event()
        try:
            return await self._ask(prompt, inputs, question, key, schema)
        finally:
            self._asking.pop(key).set()

    async def _ask(
        self, prompt: JudgePrompt, inputs: dict[str, str], question: str, key: str, schema: Schema | None
    ) -> dict[str, Any]:
        async with self._slots:
            backend = await self.backend()
            t0 = time.monotonic()
            reply = await ask(backend, question, prompt.max_tokens, schema)
            seconds = time.monotonic() - t0
            prompt_tokens = backend.count_tokens(question)
        record = {
            "key": key,
            "judge": answering(self.name, prompt),
            "answered_by": reply.model,
            "json_schema": schema is not None,
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
