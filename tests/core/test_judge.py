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
from tuiagent.core.judge import Judge, JudgeModels, ask, judge_model, judge_name, pair_winner
from tuiagent.core.judge_prompts import UNPARSEABLE, json_object, prompt, registered
from tuiagent.core.judge_store import JUDGEMENTS, JudgementStore
from tuiagent.errors import UserError
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
    text = prompt(prompt_id).template
    text = text[: text.index(cut)] if cut else text
    template = _flat(text.replace("{{", "{").replace("}}", "}"))
    assert template in _flat(files[0].read_text(encoding="utf-8"))


# -- replies held to the prompts' JSON schemas (--judge-json) ---------------------------------------


async def test_a_json_judge_sends_each_prompts_schema_and_caches_apart_from_free_replies(tmp_path):
    inputs = {"question": "q", "response_str": "r", "ground_truth": "g"}
    free = scripted('{"analysis": "a", "true_false": false}')
    await Judge("judge", backend=free, store=JudgementStore(tmp_path)).single(CORRECT, **inputs)
    assert free.schemas == []  # a free judge never asks for structured output
    held = scripted('{"analysis": "a", "true_false": true}')
    judge = Judge(judge_name("judge", True), backend=held, store=JudgementStore(tmp_path))
    assert judge.model_id == "judge" and judge.json_replies
    assert await judge.single(CORRECT, **inputs) is True  # asked again: the free reply is another judgement
    assert held.schemas == [CORRECT.schema] and judge.cost.cached == 0
    records = list(JudgementStore(tmp_path).latest.values())
    assert {(r["judge"], r["json_schema"]) for r in records} == {("judge", False), ("judge+json", True)}


async def test_a_prompt_without_a_schema_is_the_same_judgement_for_a_json_judge(tmp_path):
    audit = prompt("attc_conflict")
    assert audit.schema is None  # it asks for \boxed{}, not JSON
    await Judge("judge", backend=scripted("\\boxed{1}"), store=JudgementStore(tmp_path)).single(audit, response="x")
    again = scripted("\\boxed{2}")
    judge = Judge(judge_name("judge", True), backend=again, store=JudgementStore(tmp_path))
    assert await judge.single(audit, response="x") == 1 and again.prompts == [] and again.schemas == []


def test_judge_names_round_trip():
    assert judge_model(judge_name("m", True)) == ("m", True)
    assert judge_model(judge_name("m", False)) == ("m", False)


async def test_a_backend_without_structured_outputs_is_a_clear_error():
    class Plain:  # a Backend without stream_json
        model_id = "plain"

        def __init__(self):
            self.inner = scripted("{}")

        def render_chat(self, messages):
            return self.inner.render_chat(messages)

        def stream(self, prompt, sampling, stop):
            return self.inner.stream(prompt, sampling, stop)

    with pytest.raises(UserError, match="cannot hold a reply to a JSON schema.*without --judge-json"):
        await ask(Plain(), "question", 8, CORRECT.schema)


def test_every_json_prompt_has_a_schema_that_its_parser_accepts_a_conforming_reply_of():
    """Each schema transcribes its prompt's printed format: a reply built from the schema parses."""
    conforming = {
        "correctness": {"analysis": "same", "true_false": True},
        "necessity": {"tool_necessary": False, "reason": "trivial"},
        "win_rate": {
            k: {c: {"score": 1, "explanation": ""} for c in ("logic", "assumption", "creativity", "algebra_arithmetic")}
            | {"final_score": {"score": 1}}
            for k in ("A_grades", "B_grades")
        }
        | {"best_solution": "B"},
        "miss_rate": {"gold_steps": [{"step": 1, "summary": "s"}], "missing_steps": []},
        "error_types": {
            k: {"exists": "yes" if k == "none_of_the_above" else "no", "explanation": ""}
            for k in ("logic", "assumption", "creativity", "algebra_arithmetic", "none_of_the_above")
        },
    }
    with_schema = {pid for pid, p in registered().items() if p.schema is not None}
    assert with_schema == set(conforming)
    for pid, reply in conforming.items():
        schema = prompt(pid).schema
        assert schema is not None and list(schema["properties"]) == list(reply)  # the printed order
        assert prompt(pid).parse(JudgeReply(json.dumps(reply))) != UNPARSEABLE, pid


# -- judgements in flight together (--concurrency) --------------------------------------------------


class Overlapping(ScriptedBackend):
    """A scripted judge that counts its streams in flight (each token takes a moment)."""

    def __init__(self, replies: list[str]):
        super().__init__([split_tokens(r, -0.1) for r in replies], model_id="judge", delay_s=0.01)
        self.in_flight = self.most = 0

    async def generate(self, out, prompt, sampling, stop):
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            async for t in super().generate(out, prompt, sampling, stop):
                yield t
        finally:
            self.in_flight -= 1


async def test_judgements_go_concurrency_at_a_time_in_the_order_asked_and_a_repeat_is_asked_once(tmp_path):
    backend = Overlapping(['{"analysis": "a", "true_false": true}'] * 6)
    judge = Judge("judge", backend=backend, store=JudgementStore(tmp_path), concurrency=3)
    items = [(CORRECT, {"question": f"q{i}", "response_str": "r", "ground_truth": "g"}) for i in range(5)]
    records = await judge.judgements([*items, items[0]])  # the first question again, while it is in flight
    assert backend.most == 3 and len(backend.prompts) == 5  # never more than 3; the repeat waited for the answer
    assert backend.prompts == [
        render_named("chatml", [{"role": "user", "content": CORRECT.render(**i)}]) for _, i in items
    ]
    assert [r["inputs"]["question"] for r in records] == ["q0", "q1", "q2", "q3", "q4", "q0"]
    assert judge.cost.calls == 5 and judge.cost.cached == 1


async def test_one_judgement_at_a_time_by_default():
    backend = Overlapping(['{"true_false": true}'] * 3)
    judge = Judge("judge", backend=backend)
    await judge.judgements(
        [(CORRECT, {"question": f"q{i}", "response_str": "r", "ground_truth": "g"}) for i in range(3)]
    )
    assert backend.most == 1


async def test_a_local_judge_with_concurrency_is_loaded_as_the_batched_engine(tmp_path):
    models = tmp_path / "models.toml"
    models.write_text(
        '[models.local]\nbackend = "llama_cpp"\n[models.local.source]\nkind = "path"\npath = "x.gguf"\n'
        '[models.other]\nbackend = "scripted"\n[models.other.source]\nkind = "script"\npath = "s.jsonl"\n',
        encoding="utf-8",
    )
    opened = []

    def record(spec, **options):
        opened.append((spec.id, options))
        return scripted("ok")

    pool = JudgeModels(models, opener=record, concurrency=4)
    await pool("local")
    await pool("other")
    assert opened == [("local", {"n_seq": 4}), ("other", {})]
    assert Judge("local", models=pool)._slots._value == 4  # its judgements go 4 at a time
    await pool.aclose()


def test_each_paper_registers_its_own_prompts_through_an_entry_point():
    import guards.attc.prompts
    import guards.gstep.prompts
    import guards.necessity.judging
    import guards.tim.prompts
    from tuiagent.core.judge_prompts import PROMPTS

    assert set(PROMPTS) == {"gold_steps"}  # the core carries only the shared one
    by_paper = {
        m.__name__: {p.id for p in m.PROMPTS}
        for m in (guards.attc.prompts, guards.gstep.prompts, guards.necessity.judging, guards.tim.prompts)
    }
    assert by_paper == {
        "guards.attc.prompts": {"attc_conflict", "attc_tool_ignored", "attc_tool_wrong"},
        "guards.gstep.prompts": {"answer_unchanged", "plan_mismatch"},
        "guards.necessity.judging": {"necessity", "correctness"},
        "guards.tim.prompts": {"win_rate", "miss_rate", "error_types"},
    }
    plugged = {
        p.id: p
        for m in (guards.attc.prompts, guards.gstep.prompts, guards.necessity.judging, guards.tim.prompts)
        for p in m.PROMPTS
    }
    assert {pid: p for pid, p in registered().items() if pid not in PROMPTS} == plugged
    with pytest.raises(ValueError, match="unknown judge prompt 'nope'; known: .*necessity"):
        prompt("nope")
