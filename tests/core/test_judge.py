"""The judge facility with a scripted judge (the real ScriptedBackend replaying written replies)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path

import pytest

from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.backends.templates import render_named
from tuiagent.core.judge import Judge, JudgeModels, pair_winner
from tuiagent.core.judge_prompts import PROMPTS, UNPARSEABLE, json_object, prompt
from tuiagent.core.judge_store import JUDGEMENTS, JudgementStore
from tuiagent.protocol import JudgeReply

PAPERS = Path("/work/shared/papers")
WIN = prompt("win_rate")
CORRECT = prompt("correctness")


def scripted(*replies: str) -> ScriptedBackend:
    return ScriptedBackend([split_tokens(r, -0.1) for r in replies], model_id="judge")


def best(letter: str) -> str:
    return json.dumps({"A_grades": {}, "B_grades": {}, "best_solution": letter})


async def test_pairwise_asks_both_orders_and_maps_the_winner_back():
    backend = scripted(best("A"), best("B"))
    judge = Judge("judge", backend=backend)
    got = await judge.pairwise(WIN, "FIRST SOLUTION", "SECOND SOLUTION", problem="1+1?")
    assert got.winner == "first" and got.orders == ("A", "B")
    first_as_a = WIN.render(problem="1+1?", a="FIRST SOLUTION", b="SECOND SOLUTION")
    first_as_b = WIN.render(problem="1+1?", a="SECOND SOLUTION", b="FIRST SOLUTION")
    assert backend.prompts == [
        render_named("chatml", [{"role": "user", "content": q}]) for q in (first_as_a, first_as_b)
    ]


@pytest.mark.parametrize(
    "orders, winner",
    [
        (("A", "B"), "first"),
        (("B", "A"), "second"),
        (("A", "A"), "inconsistent"),
        (("B", "B"), "inconsistent"),
        (("A", UNPARSEABLE), UNPARSEABLE),
    ],
)
def test_pair_winner(orders, winner):
    assert pair_winner(orders) == winner


async def test_position_bias_reads_inconsistent():
    judge = Judge("judge", backend=scripted(best("A"), best("A")))
    assert (await judge.pairwise(WIN, "x", "y", problem="p")).winner == "inconsistent"


@pytest.mark.parametrize(
    "text, value",
    [
        ('{"analysis": "same", "true_false": true}', True),
        ('```json\n{"analysis": "no", "true_false": false}\n```', False),
        ('{"analysis": "same", "true_false": "true"}', UNPARSEABLE),  # a string, not a boolean
        ('The answer is right. {"true_false": true}', UNPARSEABLE),  # text around the JSON
        ('{"analysis": "cut', UNPARSEABLE),
    ],
)
def test_correctness_is_parsed_strictly(text, value):
    assert CORRECT.parse(JudgeReply(text)) == value


def test_win_rate_needs_a_or_b():
    assert WIN.parse(JudgeReply(best("A"))) == "A"
    assert WIN.parse(JudgeReply(best("A or B"))) == UNPARSEABLE
    assert json_object("[1, 2]") is None


async def test_unparseable_replies_are_counted_with_the_cost():
    judge = Judge("judge", backend=scripted('{"true_false": true}', "yes it is"))
    inputs = {"question": "q", "response_str": "r", "ground_truth": "g"}
    assert await judge.single(CORRECT, **inputs) is True
    assert await judge.single(CORRECT, **{**inputs, "response_str": "s"}) == UNPARSEABLE
    cost = judge.cost.as_dict()
    assert cost["calls"] == 2 and cost["judged"] == {"correctness": 2} and cost["unparseable"] == {"correctness": 1}
    assert cost["generated_tokens"] == 5 and cost["prompt_tokens"] > 100 and cost["seconds"] >= 0


async def test_judgements_are_cached_by_model_prompt_and_inputs(tmp_path):
    store = JudgementStore(tmp_path)
    inputs = {"question": "q", "response_str": "r", "ground_truth": "g"}
    await Judge("judge", backend=scripted('{"true_false": true}'), store=store).single(CORRECT, **inputs)
    store.close()
    again = scripted('{"true_false": false}')
    judge = Judge("judge", backend=again, store=JudgementStore(tmp_path))
    assert await judge.single(CORRECT, **inputs) is True and again.prompts == []  # from the cache
    assert judge.cost.cached == 1 and judge.cost.calls == 0
    other = scripted('{"true_false": false}')  # another judge model is asked anew
    assert await Judge("other", backend=other, store=JudgementStore(tmp_path)).single(CORRECT, **inputs) is False


async def test_an_interrupted_pass_resumes(tmp_path):
    store = JudgementStore(tmp_path)
    judge = Judge("judge", backend=scripted(best("A"), best("B")), store=store)
    await judge.pairwise(WIN, "x", "y", problem="p")
    store.close()
    path = tmp_path / JUDGEMENTS
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text(lines[0] + "\n" + lines[1][:40], encoding="utf-8")  # killed while writing the second
    resumed = JudgementStore(tmp_path)
    assert resumed.skipped_lines == 1 and len(resumed.latest) == 1
    backend = scripted(best("B"))
    judge = Judge("judge", backend=backend, store=resumed)
    assert (await judge.pairwise(WIN, "x", "y", problem="p")).winner == "first"
    assert len(backend.prompts) == 1 and judge.cost.cached == 1  # only the lost order was asked again
    resumed.close()
    assert len(JudgementStore(tmp_path).latest) == 2


async def test_judge_models_open_each_model_once_under_concurrent_first_use(tmp_path):
    (tmp_path / "judge.jsonl").write_text('{"text": "ok"}\n', encoding="utf-8")
    models = tmp_path / "models.toml"
    models.write_text(
        f'[models.judge]\nbackend = "scripted"\n[models.judge.source]\nkind = "script"\n'
        f"path = {json.dumps(str(tmp_path / 'judge.jsonl'))}\n",
        encoding="utf-8",
    )
    entered, release, opened = threading.Event(), threading.Event(), []

    def slow_open(spec):
        opened.append(spec.id)
        entered.set()
        release.wait(10)
        return scripted("ok")

    pool = JudgeModels(models, opener=slow_open)
    first = asyncio.ensure_future(pool("judge"))
    await asyncio.to_thread(entered.wait, 10)
    second = asyncio.ensure_future(pool("judge"))
    release.set()
    a, b = await asyncio.gather(first, second)
    assert a is b and opened == ["judge"]
    await pool.aclose()


def test_a_judge_needs_a_backend_or_models():
    with pytest.raises(ValueError, match="not both"):
        Judge("judge")


def steps(gold: list[int], missing: list[int]) -> str:
    return json.dumps(
        {
            "gold_steps": [{"step": n, "summary": "s"} for n in gold],
            "missing_steps": [{"step": n, "summary": "s"} for n in missing],
        }
    )


@pytest.mark.parametrize(
    "text, value",
    [
        (steps([1, 2, 3, 4], [2]), {"gold_steps": 4, "missing_steps": 1}),
        (steps([1, 2], []), {"gold_steps": 2, "missing_steps": 0}),
        (steps([], []), UNPARSEABLE),  # no gold step: no rate
        (steps([1, 2], [3]), UNPARSEABLE),  # a missing step that is not a gold step
        (steps([1, 1], [1]), UNPARSEABLE),  # a gold step twice
        ('{"gold_steps": [{"step": "1"}], "missing_steps": []}', UNPARSEABLE),  # a step number as a string
        ('{"gold_steps": [{"step": 1}]}', UNPARSEABLE),
    ],
)
def test_miss_rate_is_parsed_strictly(text, value):
    assert prompt("miss_rate").parse(JudgeReply(text)) == value


def errors(**said: str) -> str:
    keys = ("logic", "assumption", "creativity", "algebra_arithmetic", "none_of_the_above")
    return json.dumps({k: {"exists": said.get(k, "no"), "explanation": ""} for k in keys})


@pytest.mark.parametrize(
    "text, value",
    [
        (
            errors(logic="yes"),
            {
                "logic": True,
                "assumption": False,
                "creativity": False,
                "algebra_arithmetic": False,
                "none_of_the_above": False,
            },
        ),
        (
            errors(none_of_the_above="yes"),
            {
                "logic": False,
                "assumption": False,
                "creativity": False,
                "algebra_arithmetic": False,
                "none_of_the_above": True,
            },
        ),
        (errors(), UNPARSEABLE),  # no error and not "none of the above": the reply contradicts itself
        (errors(logic="yes", none_of_the_above="yes"), UNPARSEABLE),
        (errors(logic="maybe"), UNPARSEABLE),
        ('{"logic": {"exists": "yes"}}', UNPARSEABLE),
    ],
)
def test_error_types_are_parsed_strictly(text, value):
    assert prompt("error_types").parse(JudgeReply(text)) == value


def test_prompts_render_only_their_inputs():
    with pytest.raises(ValueError, match="missing"):
        CORRECT.render(question="q")
    with pytest.raises(ValueError, match="unknown judge prompt"):
        prompt("nosuch")


def _flat(text: str) -> str:
    """A paper's text as printed: markdown escapes removed, whitespace collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"\\(.)", r"\1", text)).strip()


@pytest.mark.parametrize(
    "prompt_id, paper, cut",
    [
        ("necessity", "002_", None),
        ("correctness", "002_", None),
        ("win_rate", "000_", "\n\nProblem:"),
        ("miss_rate", "000_", "\n\nProblem:"),
        ("error_types", "000_", "\n\nProblem:"),
    ],
)
def test_the_papers_prompts_are_verbatim(prompt_id, paper, cut):
    files = sorted(PAPERS.glob(f"{paper}*.txt"))
    if not files:
        pytest.skip("the papers' text is not on this machine")
    text = PROMPTS[prompt_id].template
    text = text[: text.index(cut)] if cut else text
    template = _flat(text.replace("{{", "{").replace("}}", "}"))
    assert template in _flat(files[0].read_text(encoding="utf-8"))
