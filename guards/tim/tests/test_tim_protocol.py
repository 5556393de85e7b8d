"""`eval --protocol tim`: each metric on hand-made trajectories whose right value is known (scripted
model turns through the real loop, a scripted judge replaying written replies), and the command
end to end with a scripted judge."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from guards.tim.metrics import (
    cluster_bootstrap,
    complexity,
    error_inputs,
    judge_tim,
    miss_inputs,
    pearson,
    runs_csv,
    solution,
    tim_sections,
    win_inputs,
)
from guards.tim.protocol import tim_notes, tim_tables
from tests.eval.helpers import CalcKernel, Factory, answer_turn, number_in
from tuiagent.backends.base import ContextOverflow
from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.core.judge import Judge, judge_name
from tuiagent.core.judge_store import JUDGEMENTS, JudgementStore
from tuiagent.core.run_spec import RunSpec
from tuiagent.eval.harness import EvalConfig, run_eval
from tuiagent.eval.judging import judge_cost
from tuiagent.eval.merge import merge_shards
from tuiagent.eval.protocols import settings_of
from tuiagent.eval.report import summary_from_store, to_markdown
from tuiagent.eval.results import ResultStore
from tuiagent.eval.stats import bootstrap_mean
from tuiagent.presets import load_presets, resolve_settings

KERNELS = {"jupyter": lambda gold=None: CalcKernel()}
SETTINGS = ["cot", "full", "tim-prompt"]
MODES = {"cot": "cot", "full": "tool", "tim-prompt": "tool"}

# Code cells with known size: lines (blank ones not counted) and cyclomatic complexity.
BRANCH = "x = 1\n\nif x:\n    print(x)"  # 3 lines, complexity 2 (one if)
TWO = "a = 1\nprint(a)"  # 2 lines, complexity 1
ONE = "print(3 + 3)"  # 1 line, complexity 1
OTHER = "print(4 + 4)"  # tim-prompt's cell (a solution identical to another run's would be judged once, cached)


def cell(code: str, say: str = "Let me compute.") -> str:
    return f"{say}\n```python\n{code}\n```\n```output\n"


def turns(job) -> list[str]:
    """Problem i asks for 2i. cot: right on 1 and 2; full: right on all, with the cells below; tim-prompt:
    right on 1 and 3 (wrong on 2)."""
    i, s = number_in(job.problem.question), job.setting.name
    right, wrong = answer_turn(str(2 * i)), answer_turn("0")
    if s == "cot":
        return [right if i < 3 else wrong]
    if s == "full":
        # problem 2: a precursor phrase and no derivation, which the TIM monitor flags
        return [*{1: [cell(BRANCH)], 2: [cell(TWO, "Let's verify this numerically.")] * 5, 3: [cell(ONE)]}[i], right]
    return [cell(OTHER), right if i != 2 else wrong]


def reply(value: dict) -> dict:
    return {"text": json.dumps(value)}


def win(letter: str) -> dict:
    return reply({"A_grades": {}, "B_grades": {}, "best_solution": letter})


def steps(gold: int, missing: list[int]) -> dict:
    return reply(
        {
            "gold_steps": [{"step": n, "summary": ""} for n in range(1, gold + 1)],
            "missing_steps": [{"step": n, "summary": ""} for n in missing],
        }
    )


def errors(*present: str) -> dict:
    keys = ("logic", "assumption", "creativity", "algebra_arithmetic")
    said = {k: {"exists": "yes" if k in present else "no", "explanation": ""} for k in keys}
    return reply(said | {"none_of_the_above": {"exists": "no" if present else "yes", "explanation": ""}})


# The judge's replies in the order judge_tim asks: Win Rate (each tool setting's pairs both right, TaLM as A
# then as B), Miss Rate (right runs with a reference, by key), error types (the pairs' runs, each once).
JUDGE = [  # asked problem by problem: its comparisons, then its Miss Rates, then its error types
    win("A"),
    win("B"),  # full, problem 1: TaLM wins both orders -> 1
    win("B"),
    win("A"),  # tim-prompt, problem 1: Base wins both orders -> 0
    steps(4, [1]),  # tiny/1/cot: 0.25
    steps(4, [1, 3]),  # tiny/1/full: 0.5
    steps(2, []),  # tiny/1/tim-prompt: 0
    errors(),  # tiny/1/cot: none of the above
    errors("logic", "assumption"),  # tiny/1/full
    reply(
        {k: {"exists": "no"} for k in ("logic", "assumption", "creativity", "algebra_arithmetic", "none_of_the_above")}
    ),  # tiny/1/tim-prompt: contradicts itself
    win("B"),
    win("B"),  # full, problem 2: each order prefers B (position bias) -> 0.5
    {"text": "I think two steps are missing."},  # tiny/2/cot: unparseable
    steps(5, [1, 2, 3, 4, 5]),  # tiny/2/full: 1.0
    errors("algebra_arithmetic"),  # tiny/2/cot
    errors("logic"),  # tiny/2/full
    steps(2, [2]),  # tiny/3/full: 0.5
    steps(2, [3]),  # tiny/3/tim-prompt: a missing step that is no gold step: unparseable
]


def scripted_judge(replies: list[dict]) -> ScriptedBackend:
    return ScriptedBackend([split_tokens(r["text"], -0.1) for r in replies], model_id="judge")


@pytest.fixture
async def evaluated(tmp_path, dataset):
    settings = resolve_settings([], named=load_presets(), added=settings_of("tim"))
    cfg = EvalConfig(
        datasets=[str(dataset(3))],
        settings=settings,
        out=tmp_path / "out",
        model="scripted",
        base=RunSpec(run={"max_tool_calls": 8}),
        protocols=["tim"],
    )
    outcome = await run_eval(cfg, backend_factory=Factory(turns), kernels=KERNELS, log=lambda m: None)
    assert outcome.ran == 9 and outcome.failed == 0
    return cfg.out, list(ResultStore(cfg.out).records.values())


async def test_each_metric_on_runs_whose_values_are_known(evaluated):
    out, records = evaluated
    assert SETTINGS == [s["name"] for s in ResultStore(out).manifest()["settings"]]
    store = JudgementStore(out)
    judge = Judge("judge", backend=scripted_judge(JUDGE), store=store)
    assert await judge_tim(judge, records, SETTINGS, MODES, log=lambda m: None) == len(JUDGE)
    t = tim_sections(records, SETTINGS, MODES, store, "judge")["tiny"]

    pairing = dict(t["pairing"]["full"])
    assert pairing.pop("miss_delta") == {"value": 0.25, "ci": [0.25, 0.25], "n": 1}  # problem 1: 0.5 - 0.25
    assert pairing == {
        "pairs": 3,
        "both_right": 2,
        "base_only": 0,
        "tool_only": 1,
        "neither": 0,
        "judged": 2,
        "consistent_tool": 1,
        "consistent_base": 0,
        "inconsistent": 1,
    }
    assert t["pairing"]["tim-prompt"]["both_right"] == 1 and t["pairing"]["tim-prompt"]["base_only"] == 1
    assert t["tool_use"]["full"]["value"] == 1.0 and t["tool_use"]["tim-prompt"]["n"] == 3  # every TaLM run calls
    table = t["table"]
    assert table["full"]["win_rate"]["value"] == 0.75 and table["cot"]["win_rate"]["value"] == 0.25  # vs full
    assert table["tim-prompt"]["win_rate"]["value"] == 0.0
    two_thirds = pytest.approx(2 / 3, abs=1e-4)
    assert table["cot"]["final_acc"]["value"] == two_thirds == table["tim-prompt"]["final_acc"]["value"]
    assert table["cot"]["miss_rate"] == {"value": 0.25, "ci": [0.25, 0.25], "n": 1}  # its other reply unparseable
    assert table["full"]["miss_rate"]["value"] == two_thirds and table["full"]["miss_rate"]["n"] == 3
    assert table["tim-prompt"]["miss_rate"]["value"] == 0.0 and table["tim-prompt"]["prm_acc"] is None
    assert t["unparseable"] == {"win_rate": 0, "miss_rate": 2, "error_types": 1}

    bins = t["bins"]["full"]  # problem 1: one call (0-3), problem 2: five (4-7), problem 3: one (0-3)
    assert bins["0-3"]["base_win_rate"]["value"] == 0.0 and bins["4-7"]["base_win_rate"]["value"] == 0.5
    assert bins["0-3"]["miss_rate"]["value"] == 0.5 and bins["4-7"]["miss_rate"]["value"] == 1.0
    assert (bins["0-3"]["loc"]["value"], bins["4-7"]["loc"]["value"], bins["8-11"]["loc"]["n"]) == (2.0, 2.0, 0)

    shift = t["errors"]["full"]  # Base (cot) and TaLM (full) on problems 1 and 2
    assert shift["pairs"] == 2
    assert (shift["logic"]["base"]["value"], shift["logic"]["tool"]["value"], shift["logic"]["delta"]["value"]) == (
        0.0,
        1.0,
        1.0,
    )
    assert shift["assumption"]["delta"]["value"] == 0.5 and shift["algebra_arithmetic"]["delta"]["value"] == -0.5
    assert shift["none_of_the_above"]["delta"]["value"] == -0.5 and shift["creativity"]["delta"]["value"] == 0.0
    assert t["errors"]["tim-prompt"]["pairs"] == 0  # its one pair's TaLM reply was unparseable

    code = t["complexity"]["full"]  # lines 3, 2, 1; complexity 2, 1, 1 on the three right runs
    assert code["loc"]["value"] == 2.0 and code["cc"]["value"] == pytest.approx(4 / 3, abs=1e-4)
    corr = t["correlation"]["full"]  # Miss Rate 0.5, 1.0, 0.5 against lines 3, 2, 1 and complexity 2, 1, 1
    assert corr["loc"]["r"] == 0.0 and corr["cc"]["r"] == -0.5 and corr["cc"]["n"] == 3

    monitor = t["monitor"]["full"]  # the monitor flags problem 2's TaLM run, not problem 1's
    assert (
        monitor["flagged"]["runs"],
        monitor["flagged"]["miss_rate"]["value"],
        monitor["flagged"]["base_win_rate"]["value"],
    ) == (1, 1.0, 0.5)
    assert (
        monitor["not_flagged"]["runs"],
        monitor["not_flagged"]["miss_rate"]["value"],
        monitor["not_flagged"]["base_win_rate"]["value"],
    ) == (1, 0.5, 0.0)
    assert t["high_risk"]["full"] == []  # Base won no comparison in both orders
    assert [(h["key"], h["miss_rate"]) for h in t["high_risk"]["tim-prompt"]] == [("tiny/1/tim-prompt/0", 0.0)]

    rows = {(r["setting"], r["problem_id"]): r for r in csv.DictReader(io.StringIO(runs_csv({"tiny": t})))}
    assert len(rows) == 9
    assert {
        k: rows[("full", "2")][k] for k in ("tool_calls", "bin", "win_share", "miss_rate", "logic", "loc", "cc")
    } == {
        "tool_calls": "5",
        "bin": "4-7",
        "win_share": "0.5",
        "miss_rate": "1.0",
        "logic": "True",
        "loc": "2.0",
        "cc": "1.0",
    }
    assert rows[("cot", "2")]["miss_rate"] == "" and rows[("cot", "3")]["logic"] == ""  # unparseable; not paired

    rendered = {title.split(": ", 1)[1].split(",")[0]: rows for title, _, rows in tim_tables(t, "tiny")}
    variant, setting, final, miss, won = rendered["TIM"][1][:5]  # in %, as the paper prints them
    assert (variant, setting, final) == ("TaLM", "full", "100.0 [100.0, 100.0] (n=3)")
    assert miss.startswith("66.7 [") and miss.endswith("(n=3)") and won.startswith("75.0 [") and won.endswith("(n=2)")
    assert rendered["TIM"][1][6] == "27.0 / 49.9 / 45.6 / 85.9"  # the paper's GPT-4.1 TaLM row beside ours
    assert (
        "Judge judge: left out of the figures for an unparseable reply: Win Rate 0 comparison(s), Miss Rate 2 "
        "run(s), error types 1 run(s)"
    ) in tim_notes(t)[0]


async def test_asking_again_asks_nothing_and_no_judge_still_reports(evaluated):
    out, records = evaluated
    store = JudgementStore(out)
    await judge_tim(Judge("judge", backend=scripted_judge(JUDGE), store=store), records, SETTINGS, MODES, print)
    again = Judge("judge", backend=scripted_judge([]), store=JudgementStore(out))
    assert await judge_tim(again, records, SETTINGS, MODES, log=lambda m: None) == 0
    assert again.cost.cached == len(JUDGE) and len((out / JUDGEMENTS).read_text().splitlines()) == len(JUDGE)

    summary = summary_from_store(out)  # the eval ran without --judge: what needs no judge is reported
    t = summary["datasets"]["tiny"]["tim"]
    assert t["judge"] is None and t["table"]["full"]["win_rate"]["n"] == 0 and t["table"]["full"]["miss_rate"]["n"] == 0
    assert t["complexity"]["full"]["loc"]["value"] == 2.0 and t["pairing"]["full"]["both_right"] == 2
    markdown = to_markdown(summary)
    assert "TIM, Tables 2 and 3 layout" in markdown and "need a judge: run again with --judge MODEL" in markdown
    assert "final-answer accuracy by tool calls (runs in bin; the TIM paper's bins, ours for accuracy)" in markdown


async def test_sharded_evals_merge_with_their_judgements(tmp_path, dataset):
    data = dataset(3)
    settings = resolve_settings([], named=load_presets(), added=settings_of("tim"))
    outs = {}
    for name, shard in (("whole", None), ("s1", (1, 2)), ("s2", (2, 2))):
        cfg = EvalConfig(
            datasets=[str(data)],
            settings=settings,
            out=tmp_path / name,
            model="scripted",
            base=RunSpec(run={"max_tool_calls": 8}),
            protocols=["tim"],
            shard=shard,
        )
        await run_eval(cfg, backend_factory=Factory(turns), kernels=KERNELS, log=lambda m: None)
        store = JudgementStore(cfg.out)
        await judge_tim(
            Judge("judge", backend=scripted_judge([ANY] * 20), store=store),
            list(ResultStore(cfg.out).records.values()),
            SETTINGS,
            MODES,
            log=lambda m: None,
        )
        store.close()
        outs[name] = cfg.out
    assert merge_shards([outs["s1"], outs["s2"]], tmp_path / "merged") == []
    merged = JudgementStore(tmp_path / "merged").latest
    assert set(merged) == set(JudgementStore(outs["whole"]).latest) and len(merged) == 18

    def section(out: Path) -> dict:
        return tim_sections(list(ResultStore(out).records.values()), SETTINGS, MODES, JudgementStore(out), "judge")

    assert section(tmp_path / "merged")["tiny"]["table"] == section(outs["whole"])["tiny"]["table"]


class ShortContext(ScriptedBackend):
    """A judge whose context the comparisons of problem 2 (five cells of TWO in the TaLM run) overflow."""

    async def generate(self, out, prompt, sampling, stop):
        if "Solution A:" in prompt and TWO in prompt:
            raise ContextOverflow(self.count_tokens(prompt), 100, self.model_id)
        async for token in super().generate(out, prompt, sampling, stop):
            yield token


async def test_a_question_too_long_for_the_judge_is_left_out_counted_and_asked_later(evaluated):
    out, records = evaluated
    store = JudgementStore(out)
    replies = JUDGE[:10] + JUDGE[12:]  # all but problem 2's two orders
    short = Judge(
        "judge", backend=ShortContext([split_tokens(r["text"], -0.1) for r in replies], model_id="judge"), store=store
    )
    said: list[str] = []
    assert await judge_tim(short, records, SETTINGS, MODES, said.append) == len(JUDGE) - 2
    assert "judge judge: 2 TIM question(s) did not fit its context and were not asked" in said[-1]
    t = tim_sections(records, SETTINGS, MODES, store, "judge")["tiny"]
    assert t["table"]["full"]["win_rate"] == {"value": 1.0, "ci": [1.0, 1.0], "n": 1}  # problem 1 only
    assert t["not_judged"] == {"win_rate": 1, "miss_rate": 0, "error_types": 0}
    assert "Not judged (asked in a later pass, or too long for the judge's context" in tim_notes(t)[0]

    later = Judge("judge", backend=scripted_judge(JUDGE[10:12]), store=store)  # a judge with a longer context
    assert await judge_tim(later, records, SETTINGS, MODES, said.append) == 2
    assert tim_sections(records, SETTINGS, MODES, store, "judge")["tiny"]["table"]["full"]["win_rate"]["value"] == 0.75


@pytest.mark.parametrize(
    "code, lines, cc",
    [
        (BRANCH, 3, 2),
        (TWO, 2, 1),
        (
            "def f(n):\n    # the loop\n    for i in range(n):\n        if i % 2 and i > 3:\n            return i\n"
            "    return 0\nprint(f(9))",
            7,
            4,
        ),  # 1 + its decision points (for, if, and), the function's included
    ],
)
def test_complexity_of_known_cells(code, lines, cc):
    got = complexity((code,))
    assert got is not None and (got["loc"], got["cc"], got["blocks"], got["unparsed"]) == (lines, cc, 1, 0)


def test_a_cell_radon_cannot_parse_is_counted_and_left_out():
    got = complexity((BRANCH, "print((1 +"))
    assert got is not None and (got["blocks"], got["unparsed"], got["loc"]) == (1, 1, 3)
    assert complexity(("print((1 +",)) is None and complexity(()) is None


def test_the_intervals_resample_problems_not_runs():
    values = [0.0, 1.0, 1.0, 0.5, 0.25, 1.0, 0.0]
    one_each = [(str(i), v) for i, v in enumerate(values)]
    assert cluster_bootstrap(one_each) == pytest.approx(bootstrap_mean(values))  # draw for draw
    assert cluster_bootstrap(one_each[::-1]) == cluster_bootstrap(one_each)  # whatever order the runs ended in
    seeds = [("a", 1.0)] * 10 + [("b", 0.0)] * 10  # two problems, ten seeds each
    mean, low, high = cluster_bootstrap(seeds)
    assert (mean, low, high) == (0.5, 0.0, 1.0)  # two problems say little, however many seeds
    _, naive_low, naive_high = bootstrap_mean([v for _, v in seeds])
    assert 0.2 < naive_low < naive_high < 0.8


def test_pearson_against_numpy_and_its_p_value():
    rng = np.random.default_rng(3)
    x = list(rng.normal(size=40))
    y = [v + rng.normal() for v in x]
    got = pearson(x, y)
    assert got["r"] == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-4) and got["p"] < 0.01
    assert got["ci"][0] < got["r"] < got["ci"][1]
    unrelated = list(rng.normal(size=40))
    noise = pearson(x, unrelated)  # |r| < 0.312 is p > 0.05 at n = 40 (the t-test's bound)
    assert noise["r"] == pytest.approx(np.corrcoef(x, unrelated)[0, 1], abs=1e-4)
    assert (noise["p"] > 0.05) == (abs(noise["r"]) < 0.312)
    assert pearson([1.0, 2.0], [1.0, 2.0])["r"] is None and pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])["r"] is None


def tuiagent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuiagent", *args], capture_output=True, text=True, timeout=600)


ANY = {
    "text": json.dumps(
        {  # one reply every TIM prompt parses: Win Rate "A", 1 of 2 steps missing, a logic error
            "best_solution": "A",
            "gold_steps": [{"step": 1}, {"step": 2}],
            "missing_steps": [{"step": 2}],
            **{
                k: {"exists": "yes" if k == "logic" else "no"}
                for k in ("logic", "assumption", "creativity", "algebra_arithmetic", "none_of_the_above")
            },
        }
    )
}


def judge_models(tmp_path: Path, write_script, replies: int) -> Path:
    script = write_script(*[ANY] * replies, name="judge.jsonl")
    models = tmp_path / "models.toml"
    models.write_text(
        f'[models.judge]\nbackend = "scripted"\n[models.judge.source]\nkind = "script"\n'
        f"path = {json.dumps(str(script))}\n",
        encoding="utf-8",
    )
    return models


def expected_judgements(records: list[dict]) -> set[str]:
    """The questions the protocol must ask, from the runs: both orders of each pair both right, the Miss
    Rate of each right run with a reference, the error types of each run in those pairs; the same
    question (two runs that wrote the same solution) once."""
    by = {(r["problem_id"], r["setting"]): r for r in records}
    ids = {r["problem_id"] for r in records}
    pairs = [
        (by[(i, "cot")], by[(i, t)])
        for i in ids
        for t in ("full", "tim-prompt")
        if by[(i, "cot")]["correct"] and by[(i, t)]["correct"]
    ]
    asked = set()
    for base, tool in pairs:
        b, t = solution(base), solution(tool)
        asked |= {json.dumps(["win_rate", i], sort_keys=True) for i in win_inputs(b, t)}
        asked |= {json.dumps(["error_types", error_inputs(s)], sort_keys=True) for s in (b, t)}
    asked |= {
        json.dumps(["miss_rate", miss_inputs(solution(r), r["reference"])], sort_keys=True)
        for r in records
        if r["correct"] and r["reference"]
    }
    return asked


def judgements(out: Path) -> set[str]:
    path = out / JUDGEMENTS
    lines = path.read_text().splitlines() if path.exists() else []
    return {json.dumps([r["prompt"], r["inputs"]], sort_keys=True) for r in map(json.loads, lines)}


def test_the_protocol_end_to_end_with_a_scripted_judge(write_script, dataset, tmp_path):
    script = write_script(answer_turn("4"))  # every run answers 4: right on problem 2 only
    out = tmp_path / "eval"
    args = [
        "eval",
        str(dataset(2)),
        "-m",
        "scripted",
        "--script",
        str(script),
        "--models",
        str(judge_models(tmp_path, write_script, 20)),
        "--protocol",
        "tim",
        "--judge",
        "judge",
        "--out",
        str(out),
        "-q",
        "-f",
        "md",
        "-f",
        "json",
        "-f",
        "csv",
        "-f",
        "png",
    ]
    first = tuiagent(*[a for a in args if a not in ("--judge", "judge")])  # no judge yet: the runs only
    assert first.returncode == 0 and "6 run(s) planned, 0 already done" in first.stderr, first.stderr
    assert "need a judge: run again with --judge MODEL" in (out / "summary.md").read_text()
    done = tuiagent(*args)  # the same runs, now judged
    assert done.returncode == 0, done.stderr
    assert "6 run(s) planned, 6 already done: 0 to run" in done.stderr
    # problem 2's three runs wrote the same solution: each of the three prompts is asked one question
    assert "judge judge: 3 TIM judgement(s) asked" in done.stderr
    records = list(ResultStore(out).records.values())
    assert judgements(out) == expected_judgements(records) and len(judgements(out)) == 3
    t = json.loads((out / "summary.json").read_text())["datasets"]["tiny"]["tim"]
    assert t["table"]["full"]["win_rate"]["value"] == 0.5  # "A" in both orders: position bias, half a win
    assert t["table"]["full"]["miss_rate"]["value"] == 0.5 and t["errors"]["full"]["logic"]["delta"]["value"] == 0.0
    assert (
        "judge judge: 3 judgement(s) (win_rate: 1 judged, 0 unparseable; miss_rate: 1 judged, 0 unparseable; "
        "error_types: 1 judged, 0 unparseable)" in (out / "summary.md").read_text()
    )
    assert {p.name for p in (out / "plots").iterdir()} >= {f"tim-fig{n}-tiny.png" for n in (2, 3, 4)}
    assert len((out / "tim-runs.csv").read_text().splitlines()) == 1 + 6
    again = tuiagent(*args)
    assert again.returncode == 0 and "TIM judgement(s) asked" not in again.stderr  # all cached
    assert len((out / JUDGEMENTS).read_text().splitlines()) == 3


@pytest.mark.slow
def test_the_protocol_on_smollm2(write_script, dataset, tmp_path):
    out = tmp_path / "eval"
    done = tuiagent(
        "eval",
        str(dataset(2)),
        "--model",
        "smollm2-135m",
        "--limit",
        "2",
        "--max-tokens",
        "160",
        "--max-tool-calls",
        "2",
        "--models",
        str(judge_models(tmp_path, write_script, 40)),
        "--protocol",
        "tim",
        "--judge",
        "judge",
        "--out",
        str(out),
        "-q",
        "-f",
        "md",
        "-f",
        "json",
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["setting"] for r in records) == sorted(SETTINGS * 2)
    assert judgements(out) == expected_judgements(records)
    t = json.loads((out / "summary.json").read_text())["datasets"]["tiny"]["tim"]
    assert t["pairing"]["full"]["pairs"] == 2 and t["judge"] == "judge"
    assert "TIM Figure 3, code complexity vs. Miss Rate" in (out / "summary.md").read_text()


async def test_a_json_judge_gets_each_prompts_schema_and_its_figures_are_its_own(evaluated, tmp_path):
    """--judge-json: every TIM question goes with its prompt's schema, and the figures are read under
    the judge's own name (a free judge's judgements in the same cache are other judgements)."""
    _, records = evaluated
    store = JudgementStore(tmp_path)
    backend = scripted_judge(JUDGE)
    judge = Judge(judge_name("judge", True), backend=backend, store=store)
    assert await judge_tim(judge, records, SETTINGS, MODES, log=lambda m: None) == len(JUDGE)
    assert len(backend.schemas) == len(JUDGE) and all(s["type"] == "object" for s in backend.schemas)
    held = tim_sections(records, SETTINGS, MODES, store, "judge+json")["tiny"]
    assert held["table"]["full"]["win_rate"]["value"] == 0.75 and held["unparseable"]["miss_rate"] == 2
    assert tim_sections(records, SETTINGS, MODES, store, "judge")["tiny"]["table"]["full"]["win_rate"]["n"] == 0
    assert judge_cost(store, "judge+json")["judgements"] == len(JUDGE) and judge_cost(store, "judge")["judgements"] == 0
