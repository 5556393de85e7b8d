"""An edit of the model's text on a real model (SmolLM2-135M): a turn kept to its first K
tokens continues exactly as recorded when nothing is added, token for token and logprob for logprob —
through the loop and a real kernel on the single-sequence engine, and on the batched engine with
other generations in flight (``ExactResume``); text added after them is decoded as given."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kernels.jupyter import JupyterKernel
from tuiagent.core import events as ev
from tuiagent.core.fork import edit_point
from tuiagent.core.loop import Agent
from tuiagent.core.steps import steps
from tuiagent.core.trajectory import Recorder, load
from tuiagent.protocol import RunSettings, Sampling

pytestmark = pytest.mark.slow

SAMPLING = Sampling(temperature=0.0, max_tokens=64)
SETTINGS = RunSettings(max_tokens=192, max_tool_calls=2)
PROBLEM = "Write ```python code that prints the sum of 1 to 10."  # SmolLM2 writes a block, then goes on


@pytest.fixture(scope="module")
def single(smollm2_path):
    from tuiagent.backends.llama_cpp import LlamaCppBackend

    b = LlamaCppBackend(smollm2_path, model_id="smollm2-135m", n_ctx=2048)
    yield b
    asyncio.run(b.aclose())


async def record(path: Path, backend, kernel, fork=None) -> list[ev.Event]:
    with Recorder(path) as recorder:
        agent = Agent(backend, kernel, sampling=SAMPLING, settings=SETTINGS, recorder=recorder)
        return [e async for e in agent.stream(PROBLEM, fork=fork)]


def turn_tokens(events: list[ev.Event], turn: int) -> list[tuple[str, float | None]]:
    return [(e.text, e.logprob) for e in events if isinstance(e, ev.TokenDelta) and e.turn == turn]


def ended(events: list[ev.Event], turn: int) -> ev.TurnEnded:
    return next(e for e in events if isinstance(e, ev.TurnEnded) and e.turn == turn)


def from_step(events: list[ev.Event], turn: int) -> list[tuple]:
    return [
        (s.turn, s.text, s.stop, s.code and s.code.code, s.result and s.result.shown)
        for s in steps(events)
        if s.turn >= turn
    ]


async def test_a_turn_kept_to_k_tokens_goes_on_exactly_as_recorded(single, tmp_path):
    async with JupyterKernel(images_dir=tmp_path / "images") as kernel:
        parent = await record(tmp_path / "parent.jsonl", single, kernel)
        await kernel.restart()
        events = load(tmp_path / "parent.jsonl").events
        turns = [e.turn for e in events if isinstance(e, ev.TurnEnded)]
        assert len(turns) >= 2  # the second turn's fork rebuilds the model state of the first
        checked = []
        for turn in turns[
            -2:
        ]:  # the turn before the last, then the last (the model state of the one before rebuilt first)
            n = ended(parent, turn).tokens
            for k in sorted({1, n // 2, n} if turn == turns[-1] else {n // 2}):
                point = edit_point(events, turn, "text", "", token=k)
                forked = await record(tmp_path / f"fork-{turn}-{k}.jsonl", single, kernel, fork=point)
                await kernel.restart()
                assert turn_tokens(forked, turn) == turn_tokens(parent, turn), (turn, k)
                assert ended(forked, turn).token_ids == ended(parent, turn).token_ids
                assert ended(forked, turn).layout == ended(parent, turn).layout
                assert from_step(forked, turn) == from_step(parent, turn)
                assert forked[-1].answer == parent[-1].answer and forked[-1].reason == parent[-1].reason
                checked.append((turn, k))
        assert len(checked) >= 3 and checked[0][0] == turns[-2]

        # text added after the kept tokens is in the turn, decoded as given (with the model's logprobs)
        turn = turns[-1]
        point = edit_point(events, turn, "text", " 391", token=1)
        forked = await record(tmp_path / "fork-text.jsonl", single, kernel, fork=point)
        tokens = turn_tokens(forked, turn)
        assert tokens[0] == turn_tokens(parent, turn)[0]
        assert ended(forked, turn).text.startswith(tokens[0][0] + " 391")
        assert all(lp is not None for _, lp in tokens)


async def test_on_the_batched_engine_the_kept_turn_goes_on_exactly_beside_other_runs(smollm2_path):
    from tuiagent.backends.llama_cpp import LlamaCppBackend

    backend = LlamaCppBackend(smollm2_path, model_id="smollm2-135m", n_ctx=1024, n_seq=4)
    try:
        prompt = backend.render_chat([{"role": "user", "content": PROBLEM}])
        others = [backend.render_chat([{"role": "user", "content": q}]) for q in ("Name three primes.", "What is 2+2?")]

        async def tokens(stream) -> tuple[list[tuple[str, float | None]], list[int] | None]:
            return [(t.text, t.logprob) async for t in stream], stream.token_ids

        alone = await tokens(backend.stream(prompt, SAMPLING, []))
        ids = alone[1]
        assert ids is not None and len(alone[0]) > 4
        for k in (0, len(alone[0]) // 2, len(alone[0])):
            beside = await asyncio.gather(
                tokens(backend.stream(others[0], SAMPLING, [])),
                tokens(backend.resume(prompt, SAMPLING, [], ids[:k], "")),
                tokens(backend.stream(others[1], SAMPLING, [])),
            )
            assert beside[1] == alone, k
        assert backend.info.get("n_seq") or backend.n_seq == 4
    finally:
        await backend.aclose()
