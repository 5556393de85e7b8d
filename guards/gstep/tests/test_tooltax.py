"""The tool-use-tax metrics (guards.gstep.tooltax) on hand-made records and trajectories whose right values are
worked out here by hand; the paper-layout tables (guards.gstep.tooltax_tables) name the paper's quantities."""

from __future__ import annotations

import math

import pytest

from guards.gstep.tooltax import (
    Judged,
    attribution,
    by_key,
    evidence_f1,
    gap_closure,
    gold_steps,
    overlap,
    symptoms,
    taxonomy,
    tooltax,
    wilson,
)
from guards.gstep.tooltax_tables import tooltax_tables
from tuiagent.protocol import RunPiece

CHAIN = ("cot", "fcstyle", "noop", "full")
# problem -> right under (CoT, FCStyle, NoopTool, Full)
OUTCOMES = {
    "1": (1, 1, 1, 1),  # right throughout
    "2": (0, 0, 0, 0),  # Genuine
    "3": (1, 0, 0, 0),  # Δsty-
    "4": (1, 1, 0, 0),  # Δfrc-
    "5": (1, 1, 1, 0),  # Δcmp-
    "6": (1, 1, 0, 1),  # tool-benefited, CoT solves it
    "7": (0, 0, 0, 1),  # tool-benefited, CoT does not
}


def rec(setting: str, pid: str, correct: bool, variant: str = "", seed: int = 0, **extra) -> dict:
    return {
        "setting": setting,
        "problem_id": pid,
        "variant": variant,
        "seed": seed,
        "correct": bool(correct),
        "gold": "7",
        **extra,
    }


def chain_records(variant: str = "") -> list[dict]:
    return [rec(c, pid, ok[i], variant) for pid, ok in OUTCOMES.items() for i, c in enumerate(CHAIN)]


def runs_of(records: list[dict]) -> dict:
    return {c: by_key(r for r in records if r["setting"] == c) for c in {r["setting"] for r in records}}


def test_the_decomposition_sums_to_the_gap_and_each_delta_is_its_difference():
    records = (
        chain_records()
        + [rec("oracle", p, True) for p in OUTCOMES]
        + [rec("evidence", p, OUTCOMES[p][3] or p == "2") for p in OUTCOMES]
    )
    t = tooltax(
        records,
        ["full", "cot", "fcstyle", "noop", "oracle", "evidence"],
        {n: n for n in ("full", "cot", "fcstyle", "noop", "oracle", "evidence")},
    )
    assert t is not None and t["scope"] == "clean" and t["missing"] == ["Agent-Max1Turn"]
    section = t["scopes"]["clean"]
    acc = {k: v["accuracy"] for k, v in section["accuracy"].items()}
    # CoT 5/7, FCStyle 4/7, Noop 2/7, Full 3/7, OracleCalc 7/7, OracleEvid 4/7
    assert acc["NoTool-CoT"] == round(5 / 7, 4) and acc["NoTool-FCStyle"] == round(4 / 7, 4)
    assert acc["Agent-NoopTool"] == round(2 / 7, 4) and acc["Agent-Full"] == round(3 / 7, 4)
    d = {k: v["value"] for k, v in section["deltas"].items()}
    assert d["gap"] == round(-2 / 7, 4)
    assert (d["sty"], d["frc"], d["cmp"]) == (round(-1 / 7, 4), round(-2 / 7, 4), round(1 / 7, 4))
    assert d["oracle"] == round(4 / 7, 4) and d["context"] == round(1 / 7, 4) and "turns" not in d
    lo, hi = section["deltas"]["gap"]["ci"]
    assert lo <= d["gap"] <= hi and lo < hi


def test_attribution_puts_each_wrong_full_run_at_its_earliest_failure():
    a = attribution(runs_of(chain_records()))
    assert a is not None and a["n_w"] == 4  # problems 2, 3, 4, 5
    assert [a[c]["count"] for c in ("genuine", "sty", "frc", "cmp")] == [1, 1, 1, 1]
    assert a["proto"]["count"] == 3 and a["proto"]["share"] == 0.75
    assert a["classes"] == {"2||0": "genuine", "3||0": "sty", "4||0": "frc", "5||0": "cmp"}
    assert attribution(runs_of([r for r in chain_records() if r["setting"] != "fcstyle"])) is None


def test_capability_overlap_counts_tool_benefited_runs_cot_solves():
    o = overlap(runs_of(chain_records()))
    assert (o["of"], o["count"], o["share"]) == (2, 1, 0.5)  # problems 6 and 7; CoT solves 6


def test_wilson_interval():
    assert wilson(5, 10) == [0.2366, 0.7634]
    assert wilson(0, 0) == [None, None] and wilson(0, 4)[0] == 0.0


def test_the_gap_and_overlap_on_distractors_are_pooled_over_the_variants_not_the_clean_questions():
    # clean questions: Full right everywhere, CoT wrong everywhere (these must not count)
    records = [rec("full", p, True) for p in "12"] + [rec("cot", p, False) for p in "12"]
    # thematic: Full 1/2, CoT 2/2; parallel: Full 0/2, CoT 1/2
    rows = {("1", "thematic"): (1, 1), ("2", "thematic"): (0, 1), ("1", "parallel"): (0, 1), ("2", "parallel"): (0, 0)}
    for (pid, kind), (full, cot) in rows.items():
        records += [rec("full", pid, full, f"distractor:{kind}"), rec("cot", pid, cot, f"distractor:{kind}")]
    t = tooltax(records, ["full", "cot"], {"full": "full", "cot": "cot"})
    assert t["scope"] == "distractors" and list(t["scopes"]) == ["pooled", "PED", "TB"]
    # pooled by hand: Full 1/4, CoT 3/4 -> Gap -0.5; TB: 1/2 - 1 = -0.5; PED: 0 - 1/2 = -0.5
    assert t["scopes"]["pooled"]["deltas"]["gap"]["value"] == -0.5
    assert t["scopes"]["pooled"]["deltas"]["gap"]["units"] == 4
    assert t["scopes"]["TB"]["deltas"]["gap"]["value"] == -0.5
    assert t["scopes"]["PED"]["accuracy"]["Agent-Full"]["accuracy"] == 0.0
    assert t["scopes"]["pooled"]["accuracy"]["NoTool-CoT"]["accuracy"] == 0.75


def test_gap_closure_is_the_share_of_the_gap_recovered():
    full = by_key(rec("full", str(i), i < 2) for i in range(5))  # 2/5
    cot = by_key(rec("cot", str(i), i < 4) for i in range(5))  # 4/5
    gate = by_key(rec("gate", str(i), i < 3) for i in range(5))  # 3/5
    g = gap_closure(gate, full, cot)
    assert (g["full"], g["cot"], g["accuracy"], g["cls"]) == (0.4, 0.8, 0.6, 0.5)  # (0.6-0.4)/(0.8-0.4)
    assert g["delta_vs_full"]["value"] == 0.2 and g["cls_ci"][0] <= 0.5 <= g["cls_ci"][1]
    assert gap_closure(gate, cot, full)["cls"] is None  # Full above CoT: no gap to close


def test_gstep_settings_get_their_closure_in_the_section():
    records = (
        [rec("full", str(i), i < 2) for i in range(5)]
        + [rec("cot", str(i), i < 4) for i in range(5)]
        + [rec("gate", str(i), i < 3) for i in range(5)]
        + [rec("attc", str(i), True) for i in range(5)]
    )
    t = tooltax(
        records,
        ["full", "cot", "gate", "attc"],
        {"full": "full", "cot": "cot"},
        guards={"gate": ["gstep"], "attc": ["attc"]},
    )
    assert list(t["scopes"]["clean"]["gstep"]) == ["gate"] and t["scopes"]["clean"]["best_cls"] == 0.5
    records += [rec("critic", str(i), i < 4) for i in range(5)]  # 4/5: the whole gap
    t = tooltax(
        records,
        ["full", "cot", "gate", "critic"],
        {"full": "full", "cot": "cot"},
        guards={"gate": ["gstep"], "critic": ["gstep"]},
    )
    assert t["scopes"]["clean"]["best_cls"] == 1.0
    table7 = next(rows for title, _, rows in tooltax_tables(t, "d") if "Table 7" in title)
    assert table7[2] == ["clean", "the better (the paper's Cls.)", "", "", "", "", "", "100.0"]


def test_a_gstep_setting_whose_gate_was_off_says_so_beside_its_closure():
    off = "gate off (calibration: never continue)"  # what the guard records when a calibration turned it off
    records = (
        [rec("full", str(i), i < 2) for i in range(5)]
        + [rec("cot", str(i), i < 4) for i in range(5)]
        + [rec("gate", str(i), i < 2, gate_continues=off) for i in range(5)]
        + [rec("live", str(i), i < 3, gate_continues=i % 2) for i in range(5)]
    )
    t = tooltax(
        records,
        ["full", "cot", "gate", "live"],
        {"full": "full", "cot": "cot"},
        guards={"gate": ["gstep"], "live": ["gstep"]},
    )
    closures = t["scopes"]["clean"]["gstep"]
    assert (closures["gate"]["gate_off"], closures["gate"]["cls"]) == (True, 0.0) and closures["live"][
        "gate_off"
    ] is False
    table7 = next(rows for title, _, rows in tooltax_tables(t, "d") if "Table 7" in title)
    assert [r[1] for r in table7[:2]] == ["gate (gate off in every run)", "live"]


QUESTION = "Tom has 3 apples and 4 pears. His friend has 17 apples. How many fruits does Tom have?"
CLEAN = "Tom has 3 apples and 4 pears. How many fruits does Tom have?"


def pieces(*items: tuple) -> list[RunPiece]:
    """("turn", text) | ("code", text) | ("output", text[, error])."""
    out = []
    for kind, text, *err in items:
        if kind == "code":
            out.append(RunPiece("code", text, executed=True))
        elif kind == "output":
            out.append(RunPiece("output", text, error=bool(err and err[0])))
        else:
            out.append(RunPiece("turn", text))
    return out


@pytest.mark.parametrize(
    "trajectory, reference, flags, dominant",
    [
        # E: no call gave a result (the only one failed): B too
        (pieces(("turn", "3 plus 4"), ("code", "print(3 + 4"), ("output", "SyntaxError", True)), "", "BE", "E"),
        # B: one call failed, a later one worked, the answer is wrong
        (
            pieces(
                ("code", "print(3 / 0)"),
                ("output", "ZeroDivisionError", True),
                ("code", "print(3 * 4)"),
                ("output", "12"),
            ),
            "",
            "B",
            "B",
        ),
        # D: the last output is the gold (7), the answer is not
        (pieces(("turn", "3 and 4"), ("code", "print(3 + 4)"), ("output", "7"), ("turn", "so 8")), "", "D", "D"),
        # C: the run used the friend's 17 only: Evidence-F1 0
        (pieces(("turn", "17 apples"), ("code", "print(17 + 1)"), ("output", "18")), "", "C", "C"),
        # A: three gold steps, one computation
        (
            pieces(("turn", "3 and 4"), ("code", "print(3 + 4 - 1)"), ("output", "6")),
            "3+4=<<3+4=7>>7 x<<7*1=7>>7 y<<7+0=7>>7",
            "A",
            "A",
        ),
        # F: working tools, the right evidence, enough computation, a wrong plan
        (pieces(("turn", "3 and 4"), ("code", "print(3 * 4)"), ("output", "12")), "3+4=<<3+4=7>>7", "F", "F"),
    ],
)
def test_the_failure_taxonomy(trajectory, reference, flags, dominant):
    s = symptoms(trajectory, gold="7", question=QUESTION, clean_question=CLEAN, reference=reference)
    assert "".join(t for t, on in s["flags"].items() if on) == "".join(sorted(flags))
    assert s["dominant"] == dominant


def test_evidence_f1_over_the_questions_quantities():
    assert evidence_f1("3 + 4", QUESTION, CLEAN, "") == 1.0
    assert evidence_f1("3 + 17", QUESTION, CLEAN, "") == 0.5  # P 1/2, R 1/2
    assert evidence_f1("17", QUESTION, CLEAN, "") == 0.0
    assert evidence_f1("no numbers", "How many?", "How many?", "") is None


def test_taxonomy_of_a_condition_and_its_crosstab_with_the_attribution():
    records = chain_records()
    trajectories = {
        "2": pieces(("code", "print(3 + 4)"), ("output", "7"), ("turn", "so 8")),  # D
        "3": pieces(("code", "print(17 + 1)"), ("output", "18")),  # C
        "4": pieces(("code", "print(3 + 4"), ("output", "SyntaxError", True)),  # E
        "5": pieces(("code", "print(3 * 4)"), ("output", "12")),
    }  # F
    for r in records:
        r.update(question=QUESTION, clean_question=CLEAN, reference="3+4=<<3+4=7>>7")

    def load(record):
        return trajectories.get(record["problem_id"]) if record["setting"] == "full" else None

    tx = taxonomy(by_key(r for r in records if r["setting"] == "full"), load)
    assert tx["failed"] == 4 and [tx["dominant"][t]["count"] for t in "ABCDEF"] == [0, 0, 1, 1, 1, 1]
    assert tx["any"]["B"]["count"] == 1  # the failed call of problem 4
    t = tooltax(records, list(CHAIN), {c: c for c in CHAIN}, load=load)
    cross = t["scopes"]["clean"]["crosstab"]
    assert cross["D"]["genuine"]["count"] == 1 and cross["C"]["sty"]["count"] == 1
    assert cross["E"]["frc"]["count"] == 1 and cross["F"]["cmp"]["count"] == 1 and cross["A"]["n"] == 0


def test_the_tables_use_the_papers_names_and_show_its_figures():
    records = chain_records("distractor:parallel") + chain_records()
    t = tooltax(records, list(CHAIN), {c: c for c in CHAIN}, load=lambda r: None)
    tables = tooltax_tables(t, "gsm8k", {"judge": "j", "judged": 3, "changed": 1, "unparseable": 0})
    titles = " ".join(title for title, _, _ in tables)
    for name in ("Table 2", "Table 3", "Table 4", "Table 6", "distractor validity", "semantic-distractor"):
        assert name in titles
    header3, table3 = next((h, rows) for title, h, rows in tables if "Table 3" in title)
    assert header3[2].startswith("Δsty") and header3[-1] == "largest cost"
    assert table3[0][0] == "pooled" and table3[0][-1] == "Δfrc"  # -2/7 beats Δsty -1/7; Δcmp is a gain
    assert table3[-3][:2] == ["paper: Qwen3-4B", "-33.36"] and table3[-3][5] == "+37.12"
    table4 = next((h, rows) for title, h, rows in tables if "Table 4" in title)
    assert table4[0][-1] == "Proto." and table4[1][-3][0] == "paper: Qwen3-4B" and table4[1][-3][-1] == "79.4"
    validity = next(rows for title, _, rows in tables if "validity" in title)
    assert "1 change it" in validity[2][1] and "states no value of the solution" in validity[1][0]


async def test_an_eval_with_distractors_a_judge_and_the_seven_conditions(tmp_path, dataset):
    """Scripted runs, a scripted distractor writer and a scripted judge: the judge drops the variant whose
    answer it says changes, OracleEvidence runs each variant on its clean question, and the section is
    on the distractor variants."""
    from guards.gstep.tests.test_distractors import KINDS, writer
    from tests.eval.helpers import CalcKernel, Factory, answer_turn, code_turn, models_file, number_in
    from tuiagent.core.trajectory import load as load_trajectory
    from tuiagent.eval.datasets import Problem
    from tuiagent.eval.harness import EvalConfig, evidence_question, run_eval
    from tuiagent.eval.protocols import settings_of
    from tuiagent.eval.report import summary_from_store, to_markdown
    from tuiagent.eval.results import ResultStore
    from tuiagent.presets import resolve_settings

    def turns(job):  # fooled by the parallel entity with the tool, never without
        question = evidence_question(job.problem, job.setting)  # what the run is given
        i = number_in(question)
        fooled = "cousin" in question and job.setting.spec.mode == "tool"
        answer = str(2 * i + 17 if fooled else 2 * i)
        return (
            [answer_turn(answer)] if job.setting.spec.mode != "tool" else [code_turn(f"{i} + {i}"), answer_turn(answer)]
        )

    problems = [Problem("tiny", str(i), f"What is {i} plus {i}?", str(2 * i)) for i in (1, 2)]
    writer_factory, _ = writer(problems)
    # validity: p1 thematic, p1 parallel, p2 thematic, p2 parallel (the scripted judge starts its replies
    # again in the taxonomy's pass after the runs: its "yes" to the gold steps of "2 + 2 = 4" is no count)
    models = models_file(tmp_path, ["yes", "no", "yes", "maybe"], [math.log(p) for p in (0.9, 0.6, 0.5, 0.8)])
    cfg = EvalConfig(
        datasets=[str(dataset(2))],
        settings=resolve_settings([], added=settings_of("tooltax")),
        out=tmp_path / "out",
        model="scripted",
        models_file=models,
        protocols=["distractors"],
        options={"tooltax": {"types": KINDS, "model": None}},
        judge="judge",
    )
    logs: list[str] = []
    outcome = await run_eval(
        cfg,
        backend_factory=Factory(turns),
        variant_backend=writer_factory,
        kernels={"jupyter": lambda gold=None: CalcKernel()},
        log=logs.append,
    )
    assert outcome.ran == 5 * 7  # 2 clean + 3 kept variants, under the seven conditions
    records = ResultStore(cfg.out).records
    assert "tiny/1~distractor:parallel/full/0" not in records
    evidence = load_trajectory(records["tiny/2~distractor:parallel/evidence/0"]["trajectory"]).events[0]
    assert evidence.problem == "What is 2 plus 2?"  # the clean question
    assert "cousin" in records["tiny/2~distractor:parallel/full/0"]["question"]
    summary = summary_from_store(cfg.out)
    assert summary["datasets"]["tiny"]["distractor_validity"] == {
        "judge": "judge",
        "judged": 4,
        "changed": 1,
        "unparseable": 1,
        "reply_p": 0.7,  # the mean probability of its four replies
    }
    assert [(v["id"], v["kind"]) for v in summary["invalid_variants"]] == [("1", "parallel")]
    t = summary["datasets"]["tiny"]["tooltax"]
    assert t["scope"] == "distractors" and list(t["scopes"]) == ["pooled", "PED", "TB"]
    pooled = t["scopes"]["pooled"]
    # pooled over the 3 variants: Full wrong on 2~parallel only; CoT right on all
    assert pooled["accuracy"]["Agent-Full"] == {
        **pooled["accuracy"]["Agent-Full"],
        "accuracy": round(2 / 3, 4),
        "units": 3,
    }
    assert pooled["deltas"]["gap"]["value"] == round(-1 / 3, 4)
    assert pooled["deltas"]["context"]["value"] == round(1 / 3, 4)  # the clean question rescues it
    assert pooled["attribution"]["frc"]["count"] == 1  # right in FCStyle (no tool), wrong in Noop
    assert summary["judge"]["prompts"] == {
        "answer_unchanged": {"judged": 4, "unparseable": 1},
        "gold_steps": {"judged": 1, "unparseable": 1},
    }
    full = pooled["taxonomy"]["Agent-Full"]
    assert full["failed"] == 1 and full["dominant"]["D"]["count"] == 1  # its output was the gold, 4
    markdown = to_markdown(summary)
    assert "Table 2 layout" in markdown and "judge: 4 judged, 1 change it" in markdown
    assert "the mean probability of its replies is 0.70 (0.50: a coin flip)" in markdown


def test_the_judge_counts_gold_steps_without_annotations_and_judges_type_f_plans():
    run = pieces(("turn", "3 and 4"), ("code", "print(3 * 4)"), ("output", "12"))
    unannotated = "Tom has 3 + 4 = 7 fruits."
    assert symptoms(run, gold="7", question=QUESTION, clean_question=CLEAN, reference=unannotated)["gold_steps"] is None
    judged = Judged(steps=lambda reference: 2 if reference == unannotated else None, plan=lambda inputs: True)
    s = symptoms(run, gold="7", question=QUESTION, clean_question=CLEAN, reference=unannotated, judged=judged)
    assert (s["gold_steps"], s["dominant"]) == (2, "A")  # one computation, two steps by the judge
    assert gold_steps("48/2 = <<48/2=24>>24", judged) == 1  # the annotations win
    record = rec("full", "1", False, question=QUESTION, clean_question=CLEAN, reference="3+4=<<3+4=7>>7")
    asked = []

    def plan(inputs):
        asked.append(inputs)
        return False

    tx = taxonomy(by_key([record]), lambda r: run, Judged(plan=plan), judge_plans=True)
    assert tx["dominant"]["F"]["count"] == 1 and tx["f_plans"] == {
        "coherent_wrong": 0,
        "not": 1,
        "unparseable": 0,
        "not_judged": 0,
    }
    assert asked[0]["question"] == QUESTION and "```output\n12\n```" in asked[0]["solution"]


def test_the_ours_judge_prompts_parse_strictly():
    from tuiagent.core.judge_prompts import UNPARSEABLE, prompt
    from tuiagent.protocol import JudgeReply

    def parse(prompt_id: str, text: str):
        return prompt(prompt_id).parse(JudgeReply(text, (), "j"))

    assert [parse("answer_unchanged", t) for t in ("yes", " No.", "Yes, it is", "")] == [
        True,
        False,
        UNPARSEABLE,
        UNPARSEABLE,
    ]
    assert [parse("gold_steps", t) for t in ("3", "12.", "three", "0", "2 steps")] == [
        3,
        12,
        UNPARSEABLE,
        UNPARSEABLE,
        UNPARSEABLE,
    ]
    rendered = prompt("answer_unchanged").render(original="What is 1 plus 1?", variant="V", answer="2")
    assert "The correct answer to the first is 2." in rendered and rendered.endswith("yes or no.")
    assert prompt("plan_mismatch").source.startswith("[ours]")


def test_a_variant_left_out_after_it_ran_is_not_reported():
    from tuiagent.eval.report import summarize

    records = [
        {**rec(c, "1", ok, v), "dataset": "d", "key": f"{c}{v}"}
        for c in ("full", "cot")
        for v, ok in (("distractor:parallel", c == "cot"), ("distractor:hedged", True))
    ]
    kept = summarize(records, conditions={"full": "full", "cot": "cot"})["datasets"]["d"]["tooltax"]
    assert kept["scopes"]["pooled"]["deltas"]["gap"]["value"] == -0.5
    left = summarize(
        records,
        conditions={"full": "full", "cot": "cot"},
        invalid_variants=[{"dataset": "d", "id": "1", "kind": "parallel", "why": "judge"}],
    )
    assert left["datasets"]["d"]["tooltax"]["scopes"]["pooled"]["deltas"]["gap"]["value"] == 0.0


def test_each_condition_gets_its_mean_evidence_f1():
    records = [rec("full", "1", True, key="f1"), rec("full", "2", False, key="f2"), rec("cot", "1", True, key="c1")]
    for r in records:
        r.update(question=QUESTION, clean_question=CLEAN)
    texts = {"f1": "3 + 4", "f2": "17 + 3", "c1": "no numbers at all"}
    loads: list[str] = []

    def load(record):
        loads.append(record["key"])
        return pieces(("turn", texts[record["key"]]))

    t = tooltax(records, ["full", "cot"], {"full": "full", "cot": "cot"}, load=load)
    f1 = t["scopes"]["clean"]["evidence_f1"]
    assert f1["Agent-Full"] == {"mean": 0.75, "runs": 2}  # 1.0 and 0.5
    assert f1["NoTool-CoT"] == {"mean": 0.0, "runs": 1}
    assert sorted(loads) == ["c1", "f1", "f2"]  # each trajectory read once (the taxonomy's too)


def test_the_report_has_the_section_for_the_chain_distractors_or_g_step_not_for_full_and_cot_alone():
    """A TIM or cue-probe eval runs Agent-Full and NoTool-CoT only: their gap is in the accuracy table,
    and a tool-use-tax section of conditions not run would be noise."""
    from guards.gstep.tooltax import reported
    from tuiagent.eval.report import summarize, to_markdown

    both = {"full": "full", "cot": "cot"}
    pair = [rec("full", "1", True), rec("cot", "1", False)]
    assert not reported(pair, ["full", "cot"], both, {})
    assert reported(chain_records(), list(CHAIN), {c: c for c in CHAIN}, {})
    assert reported([*pair, rec("full", "1", False, "distractor:parallel")], ["full", "cot"], both, {})
    assert reported([*pair, rec("gate", "1", True)], ["full", "cot", "gate"], both, {"gate": ["gstep"]})
    assert not reported(chain_records()[:1], ["cot"], {"cot": "cot"}, {"cot": ["gstep"]})  # no Full
    for r in pair:
        r.update(dataset="d", key=f"d/1/{r['setting']}/0")
    summary = summarize(pair, settings=["full", "cot"], conditions=both)
    assert summary["datasets"]["d"]["tooltax"] is None and "Table 2 layout" not in to_markdown(summary)
