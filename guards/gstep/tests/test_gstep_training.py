"""G-STEP's pipeline: labels, compact records from real loop runs, resumable and interruptible collection
(scripted model, canned kernel), numpy inference equal to scikit-learn's, training end to end."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

import tuiagent.runner
from guards.gstep import training as gt
from guards.gstep.features import N_FEATURES, features
from guards.gstep.guard import Gate, GStep
from guards.gstep.training import gate_input_from_record
from kernels.base import CellResult, Output
from tuiagent.core.jsonl_store import JsonlStore

sklearn = pytest.importorskip("sklearn", reason="the train extra (scikit-learn) is not installed")


def rec(qid, *, tool_ok, cot_ok, calls=1, reason="answer", answer="5"):
    executed = [[f"print({i})", str(i), False, True] for i in range(calls)]
    text = f"The result is {answer}, so \\boxed{{{answer}}}"
    turns = [{"text": f"step {i}\n```python\nprint({i})\n```\n", "stop": "stop"} for i in range(calls)]
    turns.append({"text": text, "stop": "eos"})
    return {
        "v": 1,
        "qid": qid,
        "question": f"q{qid}",
        "gold": "5",
        "model": "m",
        "tool": {
            "answer": answer,
            "correct": tool_ok,
            "reason": reason,
            "calls": executed,
            "turns": turns,
            "final_text": text,
            "max_tool_calls": 4,
        },
        "cot": {"answer": "5" if cot_ok else "6", "correct": cot_ok, "reason": "answer"},
    }


def test_labels_in_priority_order_with_weights():
    assert gt.label(rec(0, tool_ok=True, cot_ok=True)) == (0, 3.0, "agent_correct")
    assert gt.label(rec(0, tool_ok=False, cot_ok=True, calls=3)) == (1, 4.0, "cot_fixable")
    assert gt.label(rec(0, tool_ok=False, cot_ok=False, calls=1)) == (1, 2.0, "under_computed")
    assert gt.label(rec(0, tool_ok=False, cot_ok=False, calls=2)) == (0, 1.0, "both_wrong")
    unexecuted = rec(0, tool_ok=False, cot_ok=False, calls=2)
    unexecuted["tool"]["calls"][1][3] = False  # a budget note is not a tool call
    assert gt.label(unexecuted)[2] == "under_computed"


def write_data(path: Path, n: int) -> Path:
    lines = [
        json.dumps({"question": f"What is {i} + {i}?", "answer": f"{i}+{i}={2 * i}\n#### {2 * i}"}) for i in range(n)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def scripted_turns(qids):
    """Per question: one CoT turn, then a tool turn with code and a tool answer turn. The tool turn
    is what the model writes after the opening fence a required first call gives it."""
    turns = []
    for i in qids:
        turns.append(f"{i} plus {i} is \\boxed{{{2 * i}}}")
        turns.append(f"print({i} + {i})\n```\n```output\n")
        turns.append(f"So it is \\boxed{{{2 * i + (i % 2)}}}")  # odd questions: the tool run goes wrong
    return turns


@pytest.fixture
def canned_runner_kernel(monkeypatch, canned_kernel):
    """Tool runs in collection use a canned kernel (the real one is covered in tests/kernels)."""
    kernels = []

    @contextlib.asynccontextmanager
    async def kernel_for(settings, images_dir, **_):
        if settings.mode != "tool":
            yield None
            return
        kernel = canned_kernel([CellResult(outputs=(Output("stdout", "tool says hi\n"),))])
        kernels.append(kernel)
        yield kernel

    monkeypatch.setattr(tuiagent.runner, "kernel_for", kernel_for)
    return kernels


async def test_collect_appends_records_and_resumes(tmp_path, write_script, canned_runner_kernel):
    data = write_data(tmp_path / "d.jsonl", 5)
    records = tmp_path / "r.jsonl"
    script = write_script(*scripted_turns([1, 2]))
    n = await gt.collect("scripted", data, 1, 2, records, script=script, log=lambda m: None)
    assert n == 2
    got = gt.load_records(records)
    assert [r["qid"] for r in got] == [1, 2] and [r["gold"] for r in got] == ["2", "4"]
    r1 = got[0]
    assert r1["question"] == "What is 1 + 1?" and r1["model"] == "scripted"
    assert (r1["cot"]["answer"], r1["cot"]["correct"]) == ("2", True)
    assert (r1["tool"]["answer"], r1["tool"]["correct"], r1["tool"]["reason"]) == ("3", False, "answer")
    assert r1["tool"]["calls"] == [["print(1 + 1)", "tool says hi", False, True]]
    assert [t["stop"] for t in r1["tool"]["turns"]] == ["stop", "eos"]
    # Appendix I.1: the tool run "is initialized with a required tool-use step"
    assert r1["tool"]["first_call"] == "required" and r1["tool"]["turns"][0]["text"].startswith("```python\nprint(")
    assert r1["tool"]["final_text"] == "So it is \\boxed{3}" and "tokens" not in json.dumps(r1["tool"]["turns"])
    assert gt.label(r1)[2] == "cot_fixable" and gt.label(got[1])[2] == "agent_correct"
    assert list(gt.scratch_dir("gstep-collect", "scripted").glob("*.jsonl"))  # trajectories went to the user data dir
    # resume: questions 1 and 2 are skipped, only 0 and 3 run
    script = write_script(*scripted_turns([0, 3]), name="s2.jsonl")
    n = await gt.collect("scripted", data, 0, 4, records, script=script, log=lambda m: None)
    assert n == 2 and [r["qid"] for r in gt.load_records(records)] == [1, 2, 0, 3]
    assert len(canned_runner_kernel) == 4  # one kernel per tool run
    other = tmp_path / "other.jsonl"
    with JsonlStore(other) as store:
        store.append({"qid": 0, "model": "another-model"})
    with pytest.raises(ValueError, match="model-specific"):
        await gt.collect("scripted", data, 0, 4, other, script=script, log=lambda m: None)


async def test_interrupt_finishes_the_current_question_then_stops(tmp_path, write_script, canned_runner_kernel):
    data = write_data(tmp_path / "d.jsonl", 4)
    records = tmp_path / "r.jsonl"
    script = write_script(*scripted_turns([0, 1, 2, 3]))
    messages = []

    def log(msg):
        messages.append(msg)
        if msg.startswith("[gstep collect] q0"):
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C after the first question

    n = await gt.collect("scripted", data, 0, 4, records, script=script, log=log)
    assert n == 1 and [r["qid"] for r in gt.load_records(records)] == [0]
    assert any("interrupt" in m for m in messages)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers were removed


def test_numpy_gate_equals_sklearn(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, N_FEATURES)) * rng.uniform(0.1, 50, size=N_FEATURES) + rng.normal(size=N_FEATURES)
    y = (x[:, 0] + x[:, 5] / 10 + rng.normal(size=120) > 0).astype(int)
    w = rng.choice([1.0, 2.0, 3.0, 4.0], size=120)
    scaler, mlp = gt.fit_gate(x, y, w)
    expected = mlp.predict_proba(scaler.transform(x))[:, 1]
    np.testing.assert_allclose(Gate.from_sklearn(scaler, mlp).p_continue(x), expected, rtol=0, atol=1e-6)
    path = tmp_path / "gate.npz"
    with pytest.raises(ValueError, match="max_tool_calls"):  # a gate names the budget it was trained at
        gt.export_gate(scaler, mlp, path, {"model": "m"})
    with pytest.raises(ValueError, match="text_bins"):  # and what its text bins hash
        gt.export_gate(scaler, mlp, path, {"model": "m", "max_tool_calls": 6})
    gt.export_gate(scaler, mlp, path, {"model": "m", "max_tool_calls": 6, "text_bins": "reasoning"})
    with np.load(path, allow_pickle=False) as data:  # plain arrays only
        assert {"mean", "scale", "train_sd", "W0", "b0", "W1", "b1", "W2", "b2", "meta"} <= set(data.files)
        assert all(data[k].dtype != object for k in data.files)
    loaded = Gate.from_file(path)
    np.testing.assert_allclose(loaded.p_continue(x), expected, rtol=0, atol=1e-6)
    assert loaded.meta["model"] == "m" and len(loaded.meta["feature_names"]) == N_FEATURES
    assert loaded.budget == 6 and loaded.text_bins == "reasoning" and loaded.train_sd is not None
    np.testing.assert_allclose(loaded.train_sd, x.std(axis=0), rtol=1e-9)
    # one row at a time (the guard's path) gives the same numbers
    assert float(loaded.p_continue(x[3])) == pytest.approx(expected[3], abs=1e-6)


def synthetic_records(n):
    """Tool-right questions answer with a matching output; tool-wrong ones (CoT right) do not."""
    out = []
    for q in range(n):
        ok = q % 3 != 0
        r = rec(q, tool_ok=ok, cot_ok=not ok, calls=1 + q % 3, answer="5" if ok else "9")
        r["tool"]["calls"] = [[c[0], "5", False, True] for c in r["tool"]["calls"]]
        out.append(r)
    out.append(rec(n, tool_ok=False, cot_ok=False, reason="no_answer"))  # never reaches the gate: no sample
    return out


def test_train_writes_gate_and_report(tmp_path):
    records = tmp_path / "r.jsonl"
    with JsonlStore(records) as store:
        for r in synthetic_records(60):
            store.append(r)
    out, report = tmp_path / "gate.npz", tmp_path / "gate.md"
    result = gt.train(records, out, report, log=lambda m: None)
    assert result["meta"]["samples"] == 60
    assert result["meta"]["train_questions"] + result["meta"]["heldout_questions"] == 60
    assert result["summary"]["questions"] == 61 and result["summary"]["label_kinds"]["cot_fixable"] == 20
    text = report.read_text()
    for words in ("GroupKFold", "held-out", "precision", "recall", "±", "Pooled", "cot_fixable -> continue x4: 20"):
        assert words in text
    assert result["heldout"][0.5]["accuracy"] >= 0.9  # the signal is trivial to learn
    # the guard runs the trained file
    guard = GStep(GStep.Settings(weights=str(out)))
    x = features(gate_input_from_record(synthetic_records(3)[0]))
    assert 0.0 <= float(guard.gate.p_continue(x)) <= 1.0
    assert guard.gate.text_bins == result["meta"]["text_bins"] == "reasoning" and "hash the reasoning text" in text


def test_split_keeps_questions_apart():
    groups = np.arange(50)
    y = np.array([0, 1] * 25)
    train, test = gt.split_questions(groups, y, test_fraction=0.2)
    assert len(test) == 10 and not set(groups[train]) & set(groups[test])
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(50))
