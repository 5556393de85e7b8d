"""ATTC's judged audits: the reference prompts, their reader, the rates on hand-made classes, and the
judge's pass over an eval and over a results directory already there (scripted runs, a scripted judge)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guards.attc.audit import attc_section, audit_directory, whole_response
from tests.eval.helpers import CalcKernel, Factory, answer_turn, code_turn, number_in
from tuiagent.core import events as ev
from tuiagent.core.judge_prompts import UNPARSEABLE, prompt
from tuiagent.core.judge_store import JUDGEMENTS
from tuiagent.errors import UserError
from tuiagent.eval.harness import EvalConfig, run_eval
from tuiagent.eval.report import summary_from_store, to_markdown, write_reports
from tuiagent.eval.results import ResultStore
from tuiagent.presets import resolve_settings
from tuiagent.protocol import JudgeReply

KERNELS = {"jupyter": lambda gold=None: CalcKernel()}


def reply(text: str) -> JudgeReply:
    return JudgeReply(text, (), "judge")


def test_the_reference_prompts_and_their_reader():
    conflict, ignored = prompt("attc_conflict"), prompt("attc_tool_ignored")
    question = conflict.render(response="THE RUN")
    assert question.startswith("\n    I will give you a case of a model answering a mathematical problem")
    assert "the model does not trust the return result of Python code , output \\boxed{1}." in question
    assert "must be included in \\boxed{}. Do not output extra text." in question  # not the reference's backspace
    assert question.endswith("as follows:\n    THE RUN")
    case = ignored.render(case='{"idx": "1"}')
    assert 'output "\\boxed{2}". If the return result of the Python code (after "```output") is correct' in case
    assert case.endswith('as follows:\n\n    {"idx": "1"}')
    read = conflict.parse
    assert [read(reply(t)) for t in ("\\boxed{1}", "first \\boxed{0}, finally \\boxed{2}", " \\boxed{ 0 } ")] == [
        1,
        2,
        0,
    ]
    assert [read(reply(t)) for t in ("\\boxed{3}", "1", "\\boxed{yes}", "")] == [UNPARSEABLE] * 4
    wrong = prompt("attc_tool_wrong")
    assert 'If any return result of Python code is incorrect, output "\\boxed{1}".' in wrong.render(case="X")
    assert [wrong.parse(reply(t)) for t in ("\\boxed{1}", "\\boxed{2}")] == [1, UNPARSEABLE]  # two classes only


def test_the_whole_response_is_every_turn_and_what_followed_it():
    events = [
        ev.TurnEnded(turn=1, text="Compute.\n```python\nprint(2)\n```\n", stop="code", tokens=3),
        ev.ContextAppended(text="```output\n2\n```\n", source="kernel", kind="tool", call=1),
        ev.ContextAppended(text="I should believe it.\n", source="attc"),
        ev.TurnEnded(turn=2, text="So \\boxed{2}.", stop="answer", tokens=2),
    ]
    assert whole_response(events) == (
        "Compute.\n```python\nprint(2)\n```\n```output\n2\n```\nI should believe it.\nSo \\boxed{2}."
    )


def run(pid: int, correct: bool, *, tcn: int = 1, flag: bool = False) -> dict:
    return {
        "key": f"d/{pid}/s/0",
        "problem_id": str(pid),
        "variant": "",
        "setting": "s",
        "correct": correct,
        "tcn": tcn,
        "tool_ignored": flag,
    }


def test_the_rates_on_hand_made_classes():
    runs = [
        run(1, False),
        run(2, False),
        run(3, False),
        run(4, False, flag=True),
        run(5, False, tcn=0),
        run(6, True),
        run(7, True),
        run(8, True, tcn=0),
    ]
    values = {
        "d/1/s/0": {"attc_conflict": 1, "attc_tool_ignored": 1},
        "d/2/s/0": {"attc_conflict": 2, "attc_tool_ignored": 0},
        "d/3/s/0": {"attc_conflict": UNPARSEABLE, "attc_tool_ignored": None},
        "d/4/s/0": {"attc_conflict": 1, "attc_tool_ignored": 1},
        "d/5/s/0": {"attc_conflict": 0, "attc_tool_ignored": 2},  # no call: the classes its prompts fix
        "d/6/s/0": {"attc_conflict": 0, "attc_tool_wrong": 1},
        "d/7/s/0": {"attc_conflict": 2, "attc_tool_wrong": UNPARSEABLE},
        "d/8/s/0": {"attc_conflict": 0},
    }  # correct, no call: the tool-wrong question is not asked
    row = attc_section({"s": runs}, values)["s"]
    wrong = row["conflict_incorrect"]
    assert wrong["classes"] == {"0": 1, "1": 2, "2": 1, "unparseable": 1, "not judged": 0}
    assert (wrong["conflict"]["k"], wrong["conflict"]["n"], wrong["conflict"]["rate"]) == (3, 4, 0.75)
    assert (wrong["believe_self"]["k"], wrong["believe_self"]["n"]) == (2, 3)
    assert row["conflict_correct"]["conflict"]["rate"] == pytest.approx(1 / 3, abs=1e-4)
    wrong_tool = row["tool_wrong"]  # correct runs with a call: 6 (wrong output), 7 (unparseable)
    assert (wrong_tool["runs"], wrong_tool["tool_wrong"]["k"], wrong_tool["tool_wrong"]["n"]) == (2, 1, 1)
    assert wrong_tool["classes"]["unparseable"] == 1
    ignored = row["tool_ignored"]
    assert ignored["classes"] == {"0": 1, "1": 2, "2": 1, "unparseable": 0, "not judged": 1}
    assert (ignored["tool_ignored"]["rate"], ignored["overconfident"]["rate"]) == (0.5, 0.75)
    assert (ignored["cheap_flag"]["k"], ignored["cheap_flag"]["n"], ignored["flag_and_judge"]) == (1, 5, 1)
    low, high = ignored["tool_ignored"]["ci"]
    assert low < 0.5 < high


def judge_models(tmp_path, replies: list[str]):
    path = tmp_path / "judge.jsonl"
    path.write_text("".join(json.dumps({"text": r}) + "\n" for r in replies), encoding="utf-8")
    models = tmp_path / "models.toml"
    models.write_text(
        f'[models.judge]\nbackend = "scripted"\n[models.judge.source]\nkind = "script"\n'
        f"path = {json.dumps(str(path))}\n",
        encoding="utf-8",
    )
    return models


def three_runs(job):
    """1: the tool right, the answer right; 2: the tool right (4), the answer wrong (5); 3: the tool wrong
    (3 + 4), the answer wrong (7, not 6)."""
    i = number_in(job.problem.question)
    expr, answer = {1: ("1 + 1", "2"), 2: ("2 + 2", "5"), 3: ("3 + 4", "7")}[i]
    return [code_turn(expr), answer_turn(answer)]


async def test_an_eval_with_the_audit_and_a_scripted_judge(tmp_path, dataset):
    # asked in run order: 1 conflict, tool wrong; 2 conflict, tool ignored; 3 conflict, tool ignored
    models = judge_models(tmp_path, ["\\boxed{0}", "\\boxed{1}", "\\boxed{1}", "\\boxed{1}", "no idea", "\\boxed{0}"])
    cfg = EvalConfig(
        datasets=[str(dataset(3))],
        settings=resolve_settings(["none"]),
        out=tmp_path / "out",
        model="scripted",
        models_file=models,
        judge="judge",
        protocols=["attc-audit"],
        options={"attc": {"audit": True}},
    )
    logs: list[str] = []
    await run_eval(cfg, backend_factory=Factory(three_runs), kernels=KERNELS, log=logs.append)
    assert any("judge judge: 6 ATTC audit question(s) judged" in m for m in logs)
    lines = [json.loads(line) for line in (cfg.out / JUDGEMENTS).read_text(encoding="utf-8").splitlines()]
    assert [r["prompt"] for r in lines] == [
        "attc_conflict",
        "attc_tool_wrong",
        "attc_conflict",
        "attc_tool_ignored",
        "attc_conflict",
        "attc_tool_ignored",
    ]
    case = json.loads(lines[3]["inputs"]["case"])
    assert (case["idx"], case["answer"], case["pred"], case["question"]) == ("2", "4", "5", "What is 2 plus 2?")
    assert "```output\n4\n```" in case["code"] and case["solution"] == "2 + 2 = 4"
    summary = summary_from_store(cfg.out)
    row = summary["datasets"]["tiny"]["attc_audit"]["none"]
    assert row["conflict_incorrect"]["classes"]["unparseable"] == 1
    assert (row["conflict_incorrect"]["conflict"]["k"], row["conflict_incorrect"]["conflict"]["n"]) == (1, 1)
    assert row["conflict_correct"]["conflict"]["rate"] == 0.0
    assert (row["tool_ignored"]["tool_ignored"]["k"], row["tool_ignored"]["tool_ignored"]["n"]) == (1, 2)
    assert (row["tool_ignored"]["cheap_flag"]["k"], row["tool_ignored"]["flag_and_judge"]) == (1, 1)  # run 2
    assert (row["tool_wrong"]["tool_wrong"]["k"], row["tool_wrong"]["tool_wrong"]["n"]) == (
        1,
        1,
    )  # run 1, says the judge
    markdown = to_markdown(summary)
    assert "ATTC Figure 2" in markdown and "ATTC Figure 3" in markdown and "judge judge" in markdown
    assert summary["judge"]["prompts"]["attc_conflict"] == {"judged": 3, "unparseable": 1}
    written, _ = write_reports(summary, cfg.out, ["png"])
    assert cfg.out / "plots" / "attc-audit-tiny.png" in written

    judge_models(tmp_path, [])  # nothing more to say: a resumed eval asks nothing
    await run_eval(cfg, backend_factory=Factory(three_runs), kernels=KERNELS, log=logs.append)
    assert len((cfg.out / JUDGEMENTS).read_text(encoding="utf-8").splitlines()) == 6


async def test_the_audit_of_a_directory_already_there(tmp_path, dataset):
    cfg = EvalConfig(
        datasets=[str(dataset(3))], settings=resolve_settings(["none"]), out=tmp_path / "out", model="scripted"
    )
    await run_eval(cfg, backend_factory=Factory(three_runs), kernels=KERNELS, log=lambda m: None)
    assert summary_from_store(cfg.out)["datasets"]["tiny"]["attc_audit"] is None
    models = judge_models(tmp_path, ["\\boxed{0}"] * 5)
    gone = next(r for r in ResultStore(cfg.out).records.values() if r["problem_id"] == "3")
    Path(gone["trajectory"]).unlink()  # a run whose trajectory is gone cannot be read: not judged, and counted
    await audit_directory(cfg.out, "judge", models, lambda m: None)
    assert ResultStore(cfg.out).manifest()["attc_audit"] == "judge"
    row = summary_from_store(cfg.out)["datasets"]["tiny"]["attc_audit"]["none"]
    assert row["tool_ignored"]["tool_ignored"]["rate"] == 0.0 and row["tool_ignored"]["runs"] == 2
    assert row["tool_ignored"]["classes"]["not judged"] == 1 and row["tool_ignored"]["tool_ignored"]["n"] == 1
    assert row["conflict_incorrect"]["classes"]["not judged"] == 1


async def test_the_audit_needs_a_judge(tmp_path, dataset):
    cfg = EvalConfig(
        datasets=[str(dataset(1))],
        settings=resolve_settings(["none"]),
        out=tmp_path / "out",
        model="scripted",
        protocols=["attc-audit"],
        options={"attc": {"audit": True}},
    )
    with pytest.raises(UserError, match="--protocol attc-audit needs a judge"):
        await run_eval(cfg, backend_factory=Factory(three_runs), kernels=KERNELS, log=lambda m: None)


def test_the_audit_from_the_command_line(write_script, tmp_path):
    import subprocess
    import sys

    def tuiagent(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tuiagent", *args], capture_output=True, text=True, timeout=180)

    script = write_script(code_turn("150 + 3"), answer_turn("153"))  # right for bakery, wrong for books
    judge = write_script({"text": "\\boxed{0}"}, {"text": "\\boxed{0}"}, {"text": "\\boxed{1}"}, name="judge.jsonl")
    models = tmp_path / "models.toml"
    models.write_text(
        f'[models.judge]\nbackend = "scripted"\n[models.judge.source]\nkind = "script"\n'
        f"path = {json.dumps(str(judge))}\n",
        encoding="utf-8",
    )
    out = tmp_path / "eval"
    done = tuiagent(
        "eval",
        "demo",
        "-m",
        "scripted",
        "--script",
        str(script),
        "--limit",
        "2",
        "-c",
        "none",
        "--out",
        str(out),
        "-q",
        "-f",
        "md",
    )
    assert done.returncode == 0, done.stderr
    assert "ATTC Figure" not in (out / "summary.md").read_text(encoding="utf-8")
    no_judge = tuiagent("eval", str(out), "--report-only", "--protocol", "attc-audit", "-f", "md")
    assert no_judge.returncode != 0 and "--protocol attc-audit needs a judge" in no_judge.stderr
    assert "Traceback" not in no_judge.stderr
    audit = tuiagent(
        "eval",
        str(out),
        "--report-only",
        "--protocol",
        "attc-audit",
        "--judge",
        "judge",
        "--models",
        str(models),
        "-q",
        "-f",
        "md",
    )
    assert audit.returncode == 0, audit.stderr
    # both runs wrote the same response: one conflict question for both, bakery's tool-wrong one and books'
    # tool-ignored one
    assert "judge judge: 3 ATTC audit question(s) judged" in audit.stderr
    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert "ATTC Figure 2" in summary and "ATTC Figure 3" in summary and "ATTC section 2.2" in summary
    assert "| none | 1 | 1.000 (1/1; " in summary  # books: the tool ignored (class 1) among 1 incorrect run


def test_the_report_names_the_audits_judge_when_it_is_another_one():
    from tuiagent.eval.report import judges

    cue, audit = {"judge": "a"}, {"judge": "b"}
    assert judges({"judge": cue, "other_judges": [audit]}) == [cue, audit]
    assert judges({"judge": cue, "other_judges": [{"judge": "a"}]}) == [cue]  # one judge did both: one line
    assert judges({"judge": None, "other_judges": [audit]}) == [audit] and judges({}) == []
