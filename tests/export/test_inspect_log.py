"""Runs and evals as inspect_ai eval logs (tuiagent.export.inspect_log), read back with inspect_ai's
own reader and dataframe functions: samples, messages, the per-turn transcript, scores, metadata."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.eval.helpers import answer_turn, code_turn
from tuiagent.core import events as ev
from tuiagent.core.context import working_context
from tuiagent.core.trajectory import load
from tuiagent.errors import UserError
from tuiagent.export.inspect_log import eval_log, export_inspect, require_inspect, write
from tuiagent.export.inspect_sample import SCORER, RunSample

inspect_log = pytest.importorskip("inspect_ai.log")
from inspect_ai.analysis import evals_df, messages_df, samples_df  # noqa: E402
from inspect_ai.event import InfoEvent, ModelEvent, ToolEvent  # noqa: E402
from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "ui" / "data"
GUARDED, PLAIN, RTTS = DATA / "guarded.jsonl", DATA / "plain.jsonl", DATA / "rtts.jsonl"


def tuiagent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuiagent", *args], capture_output=True, text=True, timeout=180)


def read_one(path: Path):
    """A log as the viewer shows it (inspect's writer moves long texts into attachments)."""
    return inspect_log.read_eval_log(str(path), resolve_attachments=True)


def test_a_guarded_run_reads_back_with_messages_score_and_metadata(tmp_path):
    [path], warnings = export_inspect([GUARDED], tmp_path)
    assert warnings == [] and path.suffix == ".eval" and path.parent == tmp_path
    log = read_one(path)
    events = load(GUARDED).events
    started = next(e for e in events if isinstance(e, ev.RunStarted))
    assert (log.status, log.eval.model, log.eval.task_args) == (
        "success",
        "tuiagent/scripted",
        {"setting": "attc+gstep+necessity+prunetir+tim"},
    )
    [sample] = log.samples
    assert (sample.id, sample.input, sample.target) == ("guarded", started.problem, started.gold)
    score = sample.scores[SCORER]
    assert (score.value, score.answer) == ("C", "338350")

    roles = [m.role for m in sample.messages]
    assert roles[:2] == ["system", "user"] and sample.messages[1].text == started.problem
    calls = [c for m in sample.messages if isinstance(m, ChatMessageAssistant) for c in m.tool_calls or []]
    assert [c.arguments["code"] for c in calls] == [e.code for e in events if isinstance(e, ev.CodeBlock)]
    assert all(c.function == "python" and c.view.content.startswith("```python\n") for c in calls)
    tools = [m for m in sample.messages if isinstance(m, ChatMessageTool)]
    assert [t.tool_call_id for t in tools] == [c.id for c in calls]
    assert [t.text for t in tools] == [e.shown for e in events if isinstance(e, ev.ToolResult)]  # as the model read it
    assert tools[1].metadata["context_text"] == "```output\n338350\n```\n"  # and as it entered the context
    assert "NameError" in tools[0].text and tools[0].error.message == "NameError" and tools[1].error is None
    notes = [m for m in sample.messages if isinstance(m, ChatMessageUser)][1:]
    assert [n.metadata["source"] for n in notes] == [
        e.source for e in events if isinstance(e, ev.ContextAppended) and e.kind == "note"
    ]
    # STP pruned the erroneous first call: kept in the messages, marked; the second turn lost only its prose
    first, second, third = (m for m in sample.messages if isinstance(m, ChatMessageAssistant) and m.tool_calls)
    assert first.metadata["pruned_by"].startswith("STP") and first.metadata["pruned"] == ["code"]
    assert (
        second.metadata["pruned"] == ["model"] and "pruned" not in tools[1].metadata and "pruned" not in third.metadata
    )

    meta = sample.metadata
    assert meta["guards"] == "attc+gstep+necessity+prunetir+tim" and meta["guard_settings"]["attc"] == {
        "threshold": 0.97
    }
    finished = events[-1]
    assert (meta["tool_calls"], meta["erroneous_calls"], meta["generated_tokens"], meta["end_reason"]) == (
        finished.tool_calls,
        finished.erroneous_calls,
        finished.generated_tokens,
        finished.reason,
    )
    assert meta["trajectory"] == str(GUARDED) and meta["tcn"] == 3
    assert sample.total_time == finished.wall_s and sample.model_usage["tuiagent/scripted"].output_tokens == 70
    assert log.results.scores[0].metrics["accuracy"].value == 1.0


@pytest.mark.parametrize("trajectory", [GUARDED, RTTS], ids=["prune", "resample-and-suspension"])
def test_each_model_call_is_given_the_working_context_of_its_turn(tmp_path, trajectory):
    """The transcript's model calls: their input, joined, is the context the model saw at that turn
    (after prunes and a resample's truncation), character for character; tools and guard verdicts
    are events too."""
    [path], _ = export_inspect([trajectory], tmp_path)
    [sample] = read_one(path).samples
    events = load(trajectory).events
    assert any(isinstance(e, ev.ContextPruned) for e in events)
    starts = [i for i, e in enumerate(events) if isinstance(e, ev.TurnStarted)]
    model_calls = [e for e in sample.events if isinstance(e, ModelEvent)]
    assert len(model_calls) == len(starts) > 2
    for i, call in zip(starts, model_calls, strict=True):
        context = working_context(events[:i])
        seen = "".join(
            m.metadata["context_text"]
            if isinstance(m, ChatMessageTool)
            else m.text + "".join(c.view.content for c in getattr(m, "tool_calls", None) or [])
            for m in call.input[2:]
        )
        assert seen == context.text[len(context.segments[0].text) :]
    assert model_calls[0].output.choices[0].stop_reason == "tool_calls"
    for n, call in enumerate(model_calls, start=1):  # each token's logprob, when the backend gave them all
        tokens = [(e.text, e.logprob) for e in events if isinstance(e, ev.TokenDelta) and e.turn == n]
        logprobs = call.output.choices[0].logprobs
        if all(lp is not None for _, lp in tokens):
            assert [(p.token, p.logprob) for p in logprobs.content] == tokens
        else:
            assert logprobs is None
    assert [c.output.completion for c in model_calls] == [e.text for e in events if isinstance(e, ev.TurnEnded)]
    assert [t.result for t in sample.events if isinstance(t, ToolEvent)] == [
        e.shown for e in events if isinstance(e, ev.ToolResult)
    ]
    verdicts = [
        e
        for e in sample.events
        if isinstance(e, InfoEvent)
        and "action" in e.data
        and e.data["action"] not in ("pruned", "truncated for a resample")
    ]
    assert [(v.source, v.data["action"]) for v in verdicts] == [
        (f"guard {e.guard}", e.action) for e in events if isinstance(e, ev.GuardVerdict)
    ]


def test_dataframes_read_one_row_per_setting_and_sample(tmp_path):
    written, _ = export_inspect([GUARDED, PLAIN], tmp_path)
    assert len(written) == 2  # two settings: two logs
    evals = evals_df(str(tmp_path))
    assert sorted(evals["task_arg_setting"]) == ["attc+gstep+necessity+prunetir+tim", "none"]
    assert list(evals["score_tuiagent_answer_accuracy"]) == [1.0, 1.0]
    samples = samples_df(str(tmp_path))
    assert sorted(samples["id"]) == ["guarded", "plain"] and set(samples[f"score_{SCORER}"]) == {"C"}
    assert sorted(samples["metadata_guards"]) == ["attc+gstep+necessity+prunetir+tim", "none"]
    # messages_df gathers each model call's input and output: every message of the run once, by its
    # id, and (where a prune cut a turn's prose from its code) the code as the model later saw it alone
    messages = messages_df(str(tmp_path))
    assert messages["message_id"].is_unique
    logs = {log.samples[0].id: log.samples[0] for log in map(read_one, written)}
    for sample in logs.values():
        ids = set(messages[messages["sample_id"] == sample.uuid]["message_id"])
        assert ids >= {m.id for m in sample.messages}
    assert len(messages[messages["sample_id"] == logs["plain"].uuid]) == len(logs["plain"].messages)


def test_one_file_for_one_setting_a_directory_for_more(tmp_path):
    with pytest.raises(UserError, match="2 settings, which make 2 logs: give -o a directory"):
        export_inspect([GUARDED, PLAIN], tmp_path / "both.eval")
    [path], _ = export_inspect([PLAIN, PLAIN], tmp_path / "plain.json")  # the same run twice: two samples
    log = read_one(path)
    assert path == tmp_path / "plain.json" and [s.id for s in log.samples] == ["plain", "plain+"]


def test_seeds_are_epochs_reduced_to_their_mean_before_the_accuracy(tmp_path):
    """As inspect scores epochs: problem q right in one seed of two (0.5), p right in its one (1.0):
    accuracy 0.75, where pooling the three runs would say 2/3."""
    wrong = tmp_path / "wrong.jsonl"
    lines = [json.loads(line) for line in PLAIN.read_text(encoding="utf-8").splitlines()]
    lines[-1]["correct"] = False
    wrong.write_text("\n".join(map(json.dumps, lines)) + "\n", encoding="utf-8")
    runs = [
        RunSample(load(PLAIN).events, "q", 1),
        RunSample(load(wrong).events, "q", 2),
        RunSample(load(PLAIN).events, "p", 1),
    ]
    log = read_one(write(eval_log(runs, task="t", setting="s"), tmp_path / "seeds.eval"))
    assert (log.eval.config.epochs, log.eval.config.epochs_reducer, log.results.scores[0].reducer) == (
        2,
        ["mean"],
        "mean",
    )
    assert {r.sample_id: r.value for r in log.reductions[0].samples} == {"q": 0.5, "p": 1.0}
    assert log.results.scores[0].metrics["accuracy"].value == 0.75
    assert {(s.id, s.epoch): s.scores[SCORER].value for s in log.samples} == {
        ("q", 1): "C",
        ("q", 2): "I",
        ("p", 1): "C",
    }


def test_a_run_cut_short_is_a_sample_with_an_error(tmp_path):
    lines = GUARDED.read_text(encoding="utf-8").splitlines()
    cut = tmp_path / "cut.jsonl"
    start = next(i for i, line in enumerate(lines) if '"TurnStarted"' in line and '"turn": 3' in line)
    cut.write_text("\n".join(lines[: start + 4]) + "\n", encoding="utf-8")  # killed 3 tokens into turn 3
    [path], _ = export_inspect([cut], tmp_path / "out")
    [sample] = read_one(path).samples
    assert "did not finish" in sample.error.message and sample.scores is None
    calls = [e for e in sample.events if isinstance(e, ModelEvent)]
    streamed = "".join(json.loads(line)["text"] for line in lines[start + 1 : start + 4])
    assert len(calls) == 3 and calls[-1].error and calls[-1].output.completion == streamed


def test_a_file_without_a_start_is_refused_by_name(tmp_path):
    headless = tmp_path / "headless.jsonl"
    lines = GUARDED.read_text(encoding="utf-8").splitlines()
    headless.write_text("\n".join([lines[0], *lines[2:]]) + "\n", encoding="utf-8")  # the header, no RunStarted
    with pytest.raises(UserError, match="headless.jsonl has no start of a run"):
        export_inspect([headless], tmp_path)


def test_without_inspect_ai_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "inspect_ai", None)  # import inspect_ai now raises ImportError
    with pytest.raises(UserError, match=r"pip install 'tuiagent\[inspect\]'"):
        require_inspect()


def test_cli_export_inspect(tmp_path):
    done = tuiagent("export", "--inspect", str(GUARDED), str(PLAIN), "-o", str(tmp_path / "logs"))
    assert done.returncode == 0, done.stderr
    assert "2 runs in 2 inspect logs" in done.stderr and "inspect view --log-dir" in done.stderr
    assert len(list((tmp_path / "logs").glob("*.eval"))) == 2
    both = tuiagent("export", "--inspect", "--html", str(GUARDED))
    assert both.returncode != 0 and "only one of --html, --md and --inspect" in both.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_inspect_view_serves_the_logs(tmp_path):
    """`inspect view` itself: its server lists the exported logs and hands each to the viewer whole."""
    written, _ = export_inspect([GUARDED, PLAIN], tmp_path)
    port = _free_port()
    view = Path(sys.executable).with_name("inspect")
    server = subprocess.Popen(
        [str(view), "view", "start", "--log-dir", str(tmp_path), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/api"
    fetch = urllib.request.build_opener(urllib.request.ProxyHandler({})).open  # loopback: never through a proxy
    try:
        deadline = time.monotonic() + 60
        while True:  # until the server answers
            try:
                listing = json.load(fetch(f"{base}/log-files", timeout=5))
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "inspect view did not start"
                time.sleep(0.2)
        names = sorted(Path(urllib.parse.urlparse(f["name"]).path).name for f in listing["files"])
        assert names == sorted(p.name for p in written)
        for path in written:
            served = json.load(fetch(f"{base}/logs/{urllib.parse.quote(str(path))}", timeout=30))
            assert served["status"] == "success" and len(served["samples"]) == 1
            assert served["samples"][0]["scores"][SCORER]["value"] == "C"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_eval_on_the_demo_set_writes_one_log_per_setting(write_script, tmp_path):
    """End to end: the scripted model, a real kernel, three settings (one without the tool); then
    --report-only writes them again."""
    script = write_script(code_turn("150 + 3"), answer_turn("153"))
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
        "-c",
        "attc",
        "-c",
        "cot",
        "--out",
        str(out),
        "-q",
        "-f",
        "json",
        "--inspect-log",
    )
    assert done.returncode == 0, done.stderr
    assert f"inspect logs: 3 in {out / 'inspect'}" in done.stderr
    records = {
        (r["setting"], r["problem_id"]): r
        for r in map(json.loads, (out / "results.jsonl").read_text(encoding="utf-8").splitlines())
    }
    logs = [read_one(p) for p in sorted((out / "inspect").glob("*.eval"))]
    assert sorted(log.eval.task_args["setting"] for log in logs) == ["attc", "cot", "none"]
    for log in logs:
        setting = log.eval.task_args["setting"]
        assert log.eval.task == "demo" and log.eval.dataset.name == "demo"
        assert sorted(s.id for s in log.samples) == ["bakery", "books"]
        for s in log.samples:
            record = records[(setting, s.id)]
            assert s.scores[SCORER].value == ("C" if record["correct"] else "I") and s.epoch == record["seed"] + 1
            assert (s.metadata["setting"], s.metadata["tcn"]) == (setting, record["tcn"])
            assert (
                Path(s.metadata["trajectory"]) == (out / record["trajectory"]).resolve()  # results: relative
                and s.metadata["question_hash"] == record["question_hash"]
            )
            calls = [e for e in s.events if isinstance(e, ModelEvent)]
            if setting == "cot":  # no tool: the model calls offer none, and nothing ran
                assert all(c.tools == [] and c.tool_choice == "none" for c in calls)
                assert not any(isinstance(e, ToolEvent) for e in s.events) and s.metadata["mode"] == "cot"
            else:
                assert calls[0].tools[0].name == "python"
                assert [t.result for t in s.events if isinstance(t, ToolEvent)] == ["153"]  # a real kernel ran it
        right = sum(records[(setting, p)]["correct"] for p in ("bakery", "books")) / 2
        assert log.results.scores[0].metrics["accuracy"].value == right
    (out / records[("none", "books")]["trajectory"]).unlink()  # a run whose trajectory is gone is left out, named
    again = tuiagent("eval", str(out), "--report-only", "-q", "-f", "json", "--inspect-log")
    assert again.returncode == 0, again.stderr
    assert "left out of the inspect logs: demo/books/none/0" in again.stderr
    assert len(list((out / "inspect").glob("*.eval"))) == 3  # written again, none left over
    assert samples_df(str(out / "inspect"))["metadata_setting"].value_counts().to_dict() == {
        "attc": 2,
        "cot": 2,
        "none": 1,
    }


def test_a_calculator_run_shows_the_calculator_to_the_viewer(tmp_path, write_script):
    script = write_script("Let me compute.\n```python\n75 / 6\n```", "So \\boxed{13}.")
    done = tuiagent(
        "solve", "75 muffins, boxes of 6?", "-m", "scripted", "--script", str(script), "--set", "tool=calculator"
    )
    assert done.returncode == 0, done.stderr
    [run] = [Path(line.split(": ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("trajectory: ")]
    [path], _ = export_inspect([run], tmp_path)
    [sample] = read_one(path).samples
    assert "A calculator evaluates it" in sample.messages[0].text  # the system prompt the model had
    model = next(e for e in sample.events if isinstance(e, ModelEvent))
    assert model.tools[0].description.startswith("A calculator: one arithmetic expression")
    assert [m.text for m in sample.messages if isinstance(m, ChatMessageTool)] == ["12.5"]
