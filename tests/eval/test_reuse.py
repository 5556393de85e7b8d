"""Reusing identical generations (``tuiagent.eval.reuse``) on the real local model (SmolLM2-135M
through llama.cpp's batched engine): a reused turn costs no model call, a run that diverges after
reused turns generates bit for bit what it generates without reuse (the reused turns are decoded
again first), a tampered record is caught, and an eval of a watching setting beside ``none``
reuses every turn and reports the same runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.backends.conftest import smollm2_path  # noqa: F401 - a fixture
from tests.eval.helpers import CalcKernel
from tuiagent.core.run_spec import RunSpec
from tuiagent.eval.reuse import GENERATIONS, GenerationMemo, ReusingBackend
from tuiagent.protocol import Sampling

pytestmark = pytest.mark.slow

GREEDY = Sampling(temperature=0.0, max_tokens=40)
SYSTEM = "You are a careful math assistant. Write Python in ```python blocks; you see its output. " * 3


@pytest.fixture(scope="module")
def engine(smollm2_path):  # noqa: F811 - the fixture imported above
    from tuiagent.backends.llama_cpp import LlamaCppBackend

    b = LlamaCppBackend(smollm2_path, model_id="smollm2-135m", n_ctx=1024, n_seq=2)
    yield b
    asyncio.run(b.aclose())


@pytest.fixture(scope="module")
def qwen_engine():
    from tests.backends.conftest import _resolve
    from tuiagent.backends.llama_cpp import LlamaCppBackend

    path, why = _resolve("qwen2.5-coder-1.5b")
    if path is None or not path.is_file():
        pytest.skip(f"the default model's GGUF is not here: {why or path}")
    b = LlamaCppBackend(path, model_id="qwen2.5-coder-1.5b", n_ctx=1024, n_seq=2)
    yield b
    asyncio.run(b.aclose())


def first_prompt(backend) -> str:
    return backend.render_chat(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 12 times 13? Show the steps."}]
    )


async def turn(backend, prompt: str, sampling: Sampling = GREEDY) -> tuple[list[tuple[str, float | None]], object]:
    stream = backend.stream(prompt, sampling, ["\n\n\n"])
    tokens = [(t.text, t.logprob) async for t in stream]
    return tokens, stream


async def two_turns(backend, second_output: str, sampling: Sampling = GREEDY) -> tuple[list, list, object]:
    """Turn 1, then turn 2 continuing turn 1's text with a tool output."""
    p1 = first_prompt(backend)
    t1, s1 = await turn(backend, p1, sampling)
    t2, s2 = await turn(backend, p1 + "".join(t for t, _ in t1) + f"\n```output\n{second_output}\n```\n", sampling)
    return t1, t2, (s1, s2)


async def test_a_reused_turn_asks_nothing_and_a_divergence_after_it_is_exact(engine, tmp_path):
    memo = GenerationMemo(tmp_path)
    first = ReusingBackend(engine, memo)
    t1, _, (s1, _) = await two_turns(first, "156")
    assert s1.layout == "batched" and len(memo) == 2 and first.reused_turns == 0

    calls = engine.stats.calls
    again = ReusingBackend(engine, memo)
    r1, r2, (a1, a2) = await two_turns(again, "156")  # the same run: every turn reused
    assert engine.stats.calls == calls, "a reused turn must not reach the model"
    assert r1 == t1 and a1.layout == a2.layout == "reused" and again.reused_turns == 2
    assert a1.token_ids == s1.token_ids and again.pending and again.replayed_turns == 0

    diverging = ReusingBackend(engine, memo)
    d1, d2, (b1, b2) = await two_turns(diverging, "157")  # turn 1 reused, turn 2 differs
    assert b1.layout == "reused" and b2.layout == "batched"
    assert diverging.replayed_turns == 1 and not diverging.mismatched and len(memo) == 3

    plain1, plain2, _ = await two_turns(engine, "157")  # the same run with no reuse at all
    assert (d1, d2) == (plain1, plain2)


async def test_on_the_default_model_the_turns_before_a_divergence_are_decoded_again(qwen_engine, tmp_path):
    """On the default model a prompt's logprobs depend on how its cells were evaluated (SmolLM2's do
    not on this engine), so this is where catching up is seen: without turn 1 decoded as it was
    generated, turn 2 comes out different."""
    short = Sampling(temperature=0.0, max_tokens=8)  # the 1.5B model on 2 cores: few tokens show it
    memo = GenerationMemo(tmp_path)
    await two_turns(ReusingBackend(qwen_engine, memo), "156", short)
    diverging = ReusingBackend(qwen_engine, memo)
    d1, d2, _ = await two_turns(diverging, "157", short)
    assert diverging.replayed_turns == 1 and not diverging.mismatched
    plain1, plain2, _ = await two_turns(qwen_engine, "157", short)
    assert (d1, d2) == (plain1, plain2)

    qwen_engine.reset_cache()  # turn 2's prompt evaluated with nothing of turn 1 in the cells
    alone, _ = await turn(
        qwen_engine, first_prompt(qwen_engine) + "".join(t for t, _ in d1) + "\n```output\n157\n```\n", short
    )
    assert [t for t, _ in alone] == [t for t, _ in plain2]
    assert [lp for _, lp in alone] != [lp for _, lp in plain2]


async def test_a_tampered_record_is_caught_when_decoded_again(engine, tmp_path):
    memo = GenerationMemo(tmp_path)
    await two_turns(ReusingBackend(engine, memo), "156")
    record = json.loads((tmp_path / GENERATIONS).read_text().splitlines()[0])
    record["tokens"][0][1] -= 0.5  # turn 1's first logprob, as if another build had made it
    lines = (tmp_path / GENERATIONS).read_text().splitlines()
    (tmp_path / GENERATIONS).write_text("\n".join([json.dumps(record), *lines[1:], '{"key": "cut sh']) + "\n")

    reloaded = GenerationMemo(tmp_path)  # a resumed eval: the cut line is skipped
    assert len(reloaded) == 2
    run = ReusingBackend(engine, reloaded)
    await two_turns(run, "157")
    assert run.replayed_turns == 1 and run.mismatched and not run.reusing
    assert len(reloaded) == 2, "a run whose state is in doubt records nothing"


async def test_an_eval_of_a_watching_setting_reuses_every_turn_of_none(tmp_path, smollm2_path):  # noqa: F811
    from tuiagent.core.trajectory import load
    from tuiagent.eval.harness import EvalConfig, run_eval
    from tuiagent.eval.results import ResultStore
    from tuiagent.presets import resolve_settings

    data = tmp_path / "tiny.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {"question": f"A box holds {i} rows of {i + 4} pens. How many pens?", "answer": f"#### {i * (i + 4)}"}
            )
            + "\n"
            for i in (3, 5)
        )
    )

    async def evaluate(out: Path, reuse: bool, concurrency: int = 1) -> dict:
        cfg = EvalConfig(
            datasets=[str(data)],
            settings=resolve_settings(["none", "tim"]),
            out=out,
            model="smollm2-135m",
            base=RunSpec(run={"max_tokens": 60, "max_tool_calls": 2}),
            reuse_generations=reuse,
            concurrency=concurrency,
        )
        await run_eval(cfg, kernels={"jupyter": lambda gold=None: CalcKernel()}, log=lambda m: None)
        return ResultStore(out).records

    reused = await evaluate(tmp_path / "reused", True)
    plain = await evaluate(tmp_path / "plain", False)
    together = await evaluate(tmp_path / "together", True, concurrency=2)  # tim waits for none's turns

    def texts(record):
        return [(e.text, e.token_ids) for e in load(Path(record["trajectory"])).events if e.type == "TurnEnded"]

    for key, record in reused.items():
        assert texts(record) == texts(plain[key])
        assert record["answer"] == plain[key]["answer"] and record["engine"].startswith("batched:")
        if record["setting"] == "tim":
            assert record["reused_turns"] == record["turns"] > 0 and record["reused_s"] > 0
        else:
            assert record["reused_turns"] == 0
        assert "reused_turns" not in plain[key]
        assert texts(together[key]) == texts(record) and together[key]["reused_turns"] == record["reused_turns"]
    assert (tmp_path / "reused" / GENERATIONS).exists() and not (tmp_path / "plain" / GENERATIONS).exists()


def test_with_runs_in_flight_each_problems_first_setting_leads_its_others():
    from tuiagent.eval.datasets import Problem
    from tuiagent.eval.harness import Job, reuse_order
    from tuiagent.presets import resolve_settings

    settings = resolve_settings(["none", "tim", "attc"])
    problems = [Problem("d", str(i), f"q{i}", "1") for i in range(5)]
    jobs = [Job(p, s, 0) for p in problems for s in settings]
    ordered, leaders = reuse_order(jobs, 2)
    assert [(j.problem.id, j.setting.name) for j in ordered[:6]] == [
        ("0", "none"),
        ("1", "none"),
        ("0", "tim"),
        ("1", "tim"),
        ("0", "attc"),
        ("1", "attc"),
    ]
    assert sorted(ordered, key=jobs.index) == jobs and len(leaders) == 10
    assert all(leaders[id(j)] is jobs[jobs.index(j) // 3 * 3] for j in jobs if j.setting.name != "none")
