"""The spurious-tool-use cue probe: the paper's cues, ΔTool Y-N over all items and on Definition 1's
items, the utility condition, and the judge's pass over an eval (scripted runs, a scripted judge)."""

from __future__ import annotations

import json

import pytest

from guards.necessity.cue_probe import cue_section, cue_table
from guards.necessity.cues import CODE_CUES, CUES, cue_variant
from tests.eval.helpers import CalcKernel, Factory, answer_turn, code_turn, models_file, number_in
from tuiagent.core.judge_prompts import UNPARSEABLE
from tuiagent.core.judge_store import JUDGEMENTS
from tuiagent.errors import ConfigError
from tuiagent.eval.datasets import Problem
from tuiagent.eval.harness import EvalConfig, run_eval
from tuiagent.eval.report import summary_from_store, to_markdown
from tuiagent.presets import resolve_settings

KERNELS = {"jupyter": lambda gold=None: CalcKernel()}
ANSWER_CUE = (
    "Conclude your response by providing the final answer within <answer></answer> tags. "
    "Do not generate any content after the </answer> tag."
)


def test_the_papers_cue_strings():
    p = Problem("d", "1", "What is 1 plus 1?", "2")
    assert cue_variant(p, "cell").question == "# Cell [1] | kernel: python3 | status: idle\nWhat is 1 plus 1?"
    assert cue_variant(p, "usr_bin").question == "#!/usr/bin/python3\nWhat is 1 plus 1?"
    assert cue_variant(p, "code").question == "[CODE]\nWhat is 1 plus 1?"
    assert cue_variant(p, "web_index").question == "Source: [WEB_INDEX_742]\nWhat is 1 plus 1?"
    assert cue_variant(p, "reference").question == "[REFERENCE]\nWhat is 1 plus 1?"
    answer = cue_variant(p, "answer")
    assert answer.question == "What is 1 plus 1?\n" + ANSWER_CUE  # appended, as in the paper
    assert (answer.variant, answer.gold, answer.unit) == ("cue:answer", "2", "1~cue:answer")
    assert list(CODE_CUES) == ["cell", "usr_bin", "code"] and len(CUES) == 6


def run(pid: str, setting: str, variant: str = "", *, tcn: int = 0, correct: bool = True) -> dict:
    unit = f"{pid}~{variant}" if variant else pid
    return {
        "key": f"d/{unit}/{setting}/0",
        "dataset": "d",
        "problem_id": pid,
        "variant": variant,
        "setting": setting,
        "seed": 0,
        "tcn": tcn,
        "correct": correct,
    }


# item -> (tcn N, tcn Y, no-tool right on N, tool right on Y, no-tool right on Y)
ITEMS = {
    "1": (0, 1, True, True, True),
    "2": (0, 1, False, True, False),
    "3": (1, 1, True, True, True),
    "4": (0, 0, True, False, True),
}
UNNECESSARY = {"necessary": False, "p_unnecessary": 1.0, "logprob": None, "reason": ""}
NECESSARY = {**UNNECESSARY, "necessary": True}


def hand_made() -> list[dict]:
    records = []
    for pid, (tcn_n, tcn_y, free_n, tool_y, free_y) in ITEMS.items():
        records += [
            run(pid, "none", tcn=tcn_n),
            run(pid, "none", "cue:cell", tcn=tcn_y, correct=tool_y),
            run(pid, "cot", correct=free_n),
            run(pid, "cot", "cue:cell", correct=free_y),
        ]
    return records


def test_delta_tool_over_all_items_and_definition_1_items():
    got = cue_section(hand_made(), ["none", "cot"], {"none": "tool", "cot": "cot"})
    assert list(got) == ["none"]  # the no-tool setting is no row of its own
    section = got["none"]
    assert section["no_tool_setting"] == "cot" and section["items"] == {"all": 4, "no_tool": 3}
    every = section["figures"]["all"]["cell"]
    assert (every["tool_rate_y"], every["tool_rate_n"], every["delta_tool_y_n"]) == (0.75, 0.25, 0.5)
    # Definition 1: "P(R=1 | x_c, T_s) <= P(R=1 | x_c, T != T_s)": the cued runs that called (items 1-3,
    # all right) against the one that did not (item 4, wrong): the tool helped, so the condition fails
    assert (every["accuracy_y_called"], every["accuracy_y_no_call"], every["utility_holds"]) == (1.0, 0.0, False)
    assert (every["accuracy_y"], every["accuracy_y_no_tool"]) == (0.75, 0.75)  # [ours] the two settings
    # Definition 1: items 1, 3, 4, which the no-tool run solves
    free = section["figures"]["no_tool"]["cell"]
    assert (free["runs"], free["tool_rate_y"], free["tool_rate_n"], free["delta_tool_y_n"]) == (
        3,
        0.6667,
        0.3333,
        0.3333,
    )
    assert (free["accuracy_y_called"], free["accuracy_y_no_call"], free["utility_holds"]) == (1.0, 0.0, False)
    assert (free["accuracy_y"], free["accuracy_y_no_tool"]) == (0.6667, 1.0)
    assert section["figures"]["no_tool"]["all"]["delta_tool_y_n"] == 0.3333


def test_the_utility_condition_holds_when_calling_is_no_better_and_is_undecided_without_both_groups():
    """ "using T_s provides no advantage over not using it" (Definition 1): the cued run without a call
    right and one with a call wrong -> it holds; when every cued run calls, there is nothing to compare."""
    flip = {("4", "cue:cell"): True, ("2", "cue:cell"): False}
    records = [
        r | {"correct": flip.get((r["problem_id"], r["variant"]), r["correct"])} if r["setting"] == "none" else r
        for r in hand_made()
    ]
    fig = cue_section(records, ["none", "cot"], {"none": "tool", "cot": "cot"})["none"]["figures"]["all"]["cell"]
    assert (fig["accuracy_y_called"], fig["accuracy_y_no_call"], fig["utility_holds"]) == (0.6667, 1.0, True)
    every_calls = [r | {"tcn": 1} if r["setting"] == "none" and r["variant"] else r for r in hand_made()]
    fig = cue_section(every_calls, ["none", "cot"], {"none": "tool", "cot": "cot"})["none"]["figures"]["all"]["cell"]
    assert (fig["accuracy_y_no_call"], fig["utility_holds"]) == (None, None)


def test_the_judges_items():
    verdicts = {
        "d/1/none/0": [],
        "d/1~cue:cell/none/0": [UNNECESSARY],
        "d/2/none/0": [],
        "d/2~cue:cell/none/0": [NECESSARY],
        "d/3/none/0": [UNNECESSARY],
        "d/3~cue:cell/none/0": [UNPARSEABLE],
        "d/4/none/0": [],
        "d/4~cue:cell/none/0": [],
    }
    section = cue_section(hand_made(), ["none", "cot"], {"none": "tool", "cot": "cot"}, verdicts)["none"]
    assert (section["items"]["judge"], section["items"]["judge_unsure"]) == (2, 1)  # 1 and 4; 3 is unsure
    assert section["items"]["judge_without_calls"] == 1  # item 4: no call with the cue or without
    _, rows = cue_table({"none": section})
    assert "tool not needed (Definition 1): items the judge calls no call necessary in (2, 1 without any call)" in {
        r[1] for r in rows
    }
    fig = section["figures"]["judge"]["cell"]
    assert (fig["runs"], fig["tool_rate_y"], fig["tool_rate_n"], fig["delta_tool_y_n"]) == (2, 0.5, 0.0, 0.5)


def test_code_and_search_cues_are_pooled_apart_and_together():
    """With both families run, each has its pooled row (the aligned cues and the paper's swapped-cue
    control) beside the pool of all; with one family only, the pool of all alone."""
    records = hand_made() + [  # the search cue [REFERENCE]: the tool on item 1 only
        r
        for pid, tcn in (("1", 1), ("2", 0), ("3", 1), ("4", 0))
        for r in (run(pid, "none", "cue:reference", tcn=tcn), run(pid, "cot", "cue:reference"))
    ]
    figs = cue_section(records, ["none", "cot"], {"none": "tool", "cot": "cot"})["none"]["figures"]["all"]
    assert list(figs) == ["cell", "reference", "all code", "all search", "all"]
    assert figs["all code"] == figs["cell"] and figs["reference"]["delta_tool_y_n"] == 0.25  # 2/4 - 1/4
    assert figs["all search"] == figs["reference"]
    pooled = figs["all"]  # 8 cued runs, 5 with a call; N: each cue's items once per cue, 2 of 8
    assert (pooled["runs"], pooled["tool_rate_y"], pooled["tool_rate_n"], pooled["delta_tool_y_n"]) == (
        8,
        0.625,
        0.25,
        0.375,
    )
    only_code = cue_section(hand_made(), ["none", "cot"], {"none": "tool", "cot": "cot"})["none"]["figures"]["all"]
    assert list(only_code) == ["cell", "all"]


def test_without_a_no_tool_setting_only_the_all_items_figure():
    records = [r for r in hand_made() if r["setting"] == "none"]
    section = cue_section(records, ["none"], {"none": "tool"})["none"]
    assert list(section["figures"]) == ["all"] and section["no_tool_setting"] is None
    header, rows = cue_table({"none": section})
    assert rows[0][:3] == ["none", "all items (4)", "cell"] and "acc Y (no call)" in header


def cued_turns(job):
    """The cell cue makes the model reach for the tool; the question as written does not."""
    i = number_in(job.problem.question)
    if job.setting.spec.mode == "tool" and job.problem.question.startswith("# Cell"):
        return [code_turn(f"{i} + {i}"), answer_turn(str(2 * i))]
    return [answer_turn(str(2 * i))]


async def test_an_eval_with_the_probe_and_a_judge(tmp_path, dataset):
    says = '{"tool_necessary": false, "reason": "trivial"}'
    models = models_file(tmp_path, [says, "no JSON here"])
    logs: list[str] = []
    cfg = EvalConfig(
        datasets=[str(dataset(2))],
        settings=resolve_settings(["none"]),
        out=tmp_path / "out",
        model="scripted",
        models_file=models,
        protocols=["cues"],
        options={"necessity": {"cues": ["cell"]}},
        judge="judge",
    )
    outcome = await run_eval(cfg, backend_factory=Factory(cued_turns), kernels=KERNELS, log=logs.append)
    assert outcome.ran == 2 * 2 * 2  # 2 problems x (plain, cell) x (none, and the added no-tool cot)
    assert any("adding the no-tool setting 'cot'" in m for m in logs)
    lines = (cfg.out / JUDGEMENTS).read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2  # one executed call in each cued tool run
    summary = summary_from_store(cfg.out)
    section = summary["datasets"]["tiny"]["cues"]["none"]
    assert section["items"] == {"all": 2, "no_tool": 2, "judge": 1, "judge_unsure": 1, "judge_without_calls": 0}
    assert section["figures"]["no_tool"]["cell"]["delta_tool_y_n"] == 1.0
    judge = summary["judge"]
    assert judge["prompts"] == {"necessity": {"judged": 2, "unparseable": 1}} and judge["warning"] is None
    assert judge["generated_tokens"] > 0 and judge["prompt_tokens"] > 0
    markdown = to_markdown(summary)
    assert "tool not needed (Definition 1): items the no-tool run solves (2)" in markdown
    assert "judge judge: 2 judgement(s) (necessity: 2 judged, 1 unparseable)" in markdown

    models_file(tmp_path, [])  # the judge can say nothing more: a resumed eval asks it nothing
    again = await run_eval(cfg, backend_factory=Factory(cued_turns), kernels=KERNELS, log=logs.append)
    assert again.ran == 0 and len((cfg.out / JUDGEMENTS).read_text(encoding="utf-8").splitlines()) == 2


async def test_an_unknown_judge_fails_before_any_run(tmp_path, dataset):
    cfg = EvalConfig(
        datasets=[str(dataset(1))],
        settings=resolve_settings(["none"]),
        out=tmp_path / "out",
        model="scripted",
        protocols=["cues"],
        options={"necessity": {"cues": ["cell"]}},
        judge="nosuch",
    )
    with pytest.raises(ConfigError, match="unknown model 'nosuch'"):
        await run_eval(cfg, backend_factory=Factory(cued_turns), kernels=KERNELS, log=lambda m: None)
    assert not (tmp_path / "out").exists()


async def test_the_model_under_test_as_judge_is_said_loudly(tmp_path, dataset):
    logs: list[str] = []
    cfg = EvalConfig(
        datasets=[str(dataset(1))],
        settings=resolve_settings(["none"]),
        out=tmp_path / "out",
        model="scripted",
        judge="scripted",
    )
    await run_eval(cfg, backend_factory=Factory(cued_turns), kernels=KERNELS, log=logs.append)
    assert any(m.startswith("WARNING: the judge is the model under test (scripted)") for m in logs)


async def test_the_judging_passes_share_one_judge_model(tmp_path, dataset, monkeypatch):
    from tuiagent.core import judge as judge_module

    opened: list[str] = []
    real = judge_module.open_backend
    monkeypatch.setattr(judge_module, "open_backend", lambda spec: opened.append(spec.id) or real(spec))
    says = '{"tool_necessary": false, "reason": "trivial"}'
    cfg = EvalConfig(
        datasets=[str(dataset(2))],
        settings=resolve_settings(["none"]),
        out=tmp_path / "out",
        model="scripted",
        models_file=models_file(tmp_path, [says] * 4 + ["\\boxed{0}"] * 40),
        protocols=["cues", "attc-audit"],
        options={"necessity": {"cues": ["cell"]}, "attc": {"audit": True}},
        judge="judge",
    )

    def with_a_call(job):  # every tool run makes a call: ATTC's audit has runs to read
        i = number_in(job.problem.question)
        return ([code_turn(f"{i} + {i}")] if job.setting.spec.mode == "tool" else []) + [answer_turn(str(2 * i))]

    await run_eval(cfg, backend_factory=Factory(with_a_call), kernels=KERNELS, log=lambda m: None)
    prompts = {json.loads(line)["prompt"] for line in (cfg.out / JUDGEMENTS).read_text(encoding="utf-8").splitlines()}
    assert "necessity" in prompts and any(p.startswith("attc_") for p in prompts)  # two passes judged
    assert opened == ["judge"]  # through one load of the judge model
