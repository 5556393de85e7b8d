"""The calibration collection through the real loop (scripted model, canned kernel): v2 records with
each block's ATTC confidence and necessity verdicts, resume after a kill, reuse of v1 CoT runs."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path

import pytest

import tuiagent.runner
from guards.gstep.training import load_records
from kernels.base import CellResult, Output
from tuiagent.core.jsonl_store import JsonlStore
from tuiagent.training.calibrate_collect import collect


def write_data(path: Path, n: int) -> Path:
    lines = [
        json.dumps({"question": f"What is {i} + {i}?", "answer": f"{i}+{i}={2 * i}\n#### {2 * i}"}) for i in range(n)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def turns(qids, *, cot=True):
    """Per question: a CoT turn, a tool turn with code, the tool answer, then the necessity judge's reply."""
    out: list = []
    for i in qids:
        if cot:
            out.append(f"{i} plus {i} is \\boxed{{{2 * i}}}")
        out.append({"text": f"Add.\n```python\nprint({i} + {i})\n```\n```output\n", "logprob": -0.05})
        out.append(f"So it is \\boxed{{{2 * i}}}")
        out.append({"tokens": [['{"tool_necessary": ', -0.3], ["false", -0.2], ["}", -0.01]]})  # the paper's JSON
    return out


@pytest.fixture
def canned_kernel_runs(monkeypatch, canned_kernel):
    @contextlib.asynccontextmanager
    async def kernel_for(settings, images_dir, **_):
        if settings.mode != "tool":
            yield None
            return
        yield canned_kernel([CellResult(outputs=(Output("stdout", "2\n"),))])

    monkeypatch.setattr(tuiagent.runner, "kernel_for", kernel_for)


async def test_collect_writes_blocks_and_resumes_after_a_kill(tmp_path, write_script, canned_kernel_runs):
    data = write_data(tmp_path / "d.jsonl", 5)
    records = tmp_path / "r.jsonl"
    n = await collect("scripted", data, 1, 2, records, script=write_script(*turns([1, 2])), log=lambda m: None)
    assert n == 2
    got = load_records(records)
    assert [(r["v"], r["qid"]) for r in got] == [(2, 1), (2, 2)]
    block = got[0]["tool"]["blocks"][0]
    assert (block["call"], block["executed"], block["error"]) == (1, True, False)
    assert block["attc"]["confidence"] == pytest.approx(math.exp(-0.05))  # guards.attc.block_confidence
    assert block["necessity"]["rule"] == {"necessary": False, "p_unnecessary": 1.0}
    model = block["necessity"]["model"]
    assert model["judge"] == "model" and model["p_unnecessary"] == pytest.approx(math.exp(-0.2))
    assert got[0]["tool"]["correct"] and got[0]["cot"]["correct"]
    with records.open("a") as f:
        f.write('{"v": 2, "qid": 3, "tru')  # a kill in mid-write
    # question 3 has a v1 record: only its tool run is redone, its CoT run is reused
    v1 = tmp_path / "v1.jsonl"
    with JsonlStore(v1) as store:
        store.append(
            {
                "v": 1,
                "qid": 3,
                "model": "scripted",
                "tool": {"answer": "6"},
                "cot": {"answer": "7", "correct": False, "reason": "answer"},
            }
        )
    script = write_script(*turns([3], cot=False), *turns([4]), name="s2.jsonl")
    messages: list[str] = []
    n = await collect("scripted", data, 1, 4, records, reuse=v1, script=script, log=messages.append)
    assert n == 2 and "2 already in" in messages[0] and "1 of them reuse a v1 CoT run" in messages[0]
    got = load_records(records)
    assert [r["qid"] for r in got] == [1, 2, 3, 4]  # 1 and 2 were not run again
    assert got[2]["cot"]["answer"] == "7" and got[2]["tool"]["answer"] == "6"


async def test_without_the_judge_no_model_is_asked_of_a_block(tmp_path, write_script, canned_kernel_runs):
    """``judge=False``: the blocks keep the rule's verdict only, and the judge's turn is never read."""
    data = write_data(tmp_path / "d.jsonl", 3)
    records = tmp_path / "r.jsonl"
    script = write_script(*(t for t in turns([1]) if not isinstance(t, dict) or "tokens" not in t))
    n = await collect("scripted", data, 1, 1, records, script=script, judge=False, log=lambda m: None)
    (block,) = load_records(records)[0]["tool"]["blocks"]
    assert n == 1 and set(block["necessity"]) == {"rule"}


async def test_a_reused_v1_record_must_match_the_rerun(tmp_path, write_script, canned_kernel_runs):
    data = write_data(tmp_path / "d.jsonl", 3)
    v1 = tmp_path / "v1.jsonl"
    with JsonlStore(v1) as store:
        store.append({"v": 1, "qid": 1, "model": "scripted", "tool": {"answer": "99"}, "cot": {"answer": "2"}})
    with pytest.raises(RuntimeError, match="not reproducible"):
        await collect(
            "scripted",
            data,
            1,
            1,
            tmp_path / "r.jsonl",
            reuse=v1,
            script=write_script(*turns([1], cot=False)),
            log=lambda m: None,
        )


async def test_a_heldout_question_gets_a_run_that_continues_at_every_answer(tmp_path, write_script, canned_kernel_runs):
    data = write_data(tmp_path / "d.jsonl", 6)
    records = tmp_path / "r.jsonl"
    code = {"text": "Add.\n```python\nprint(5 + 5)\n```\n```output\n", "logprob": -0.05}
    script = write_script(
        "5 plus 5 is \\boxed{10}",  # CoT
        code,
        "So it is \\boxed{11}",  # tool mode: a wrong answer
        code,
        "So it is \\boxed{11}",  # the continue run: the same, then G-STEP sends it back ...
        "Checked again: \\boxed{10}",  # ... and the answer changes without a new call: the forcing prompt ...
        "Still \\boxed{10}",  # ... and again without a call: no progress, commit
        {"text": '{"tool_necessary": true}', "logprob": -0.1},
    )  # the judge on the tool run's block
    n = await collect("scripted", data, 5, 1, records, script=script, log=lambda m: None)
    (record,) = load_records(records)
    assert n == 1 and record["qid"] == 5
    assert (record["tool"]["answer"], record["tool"]["correct"]) == ("11", False)
    assert (record["continue"]["answer"], record["continue"]["correct"]) == ("10", True)
    assert record["tool"]["blocks"][0]["necessity"]["model"]["necessary"] is True


async def test_an_interrupted_collection_resumes_where_it_stopped(tmp_path, write_script, canned_kernel_runs):
    import os
    import signal

    data = write_data(tmp_path / "d.jsonl", 5)
    records = tmp_path / "r.jsonl"

    def log(msg):
        if msg.startswith("[calibrate] q1:"):
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C after the first question

    n = await collect("scripted", data, 1, 3, records, script=write_script(*turns([1, 2, 3])), log=log)
    assert n == 1 and [r["qid"] for r in load_records(records)] == [1]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers were removed
    n = await collect(
        "scripted", data, 1, 3, records, script=write_script(*turns([2, 3]), name="s2.jsonl"), log=lambda m: None
    )
    assert n == 2 and [r["qid"] for r in load_records(records)] == [1, 2, 3]


@pytest.mark.slow
async def test_questions_in_flight_on_the_batched_engine_give_the_records_of_one_at_a_time(tmp_path):
    """Real SmolLM2 (its Q4_1 weights are never repacked, so the two engines agree bit for bit) and
    a real kernel: two questions at once on the batched engine, against one at a time."""
    from tests.backends.conftest import _resolve

    path, why = _resolve("smollm2-135m")
    if path is None:
        pytest.skip(why)
    data = write_data(tmp_path / "d.jsonl", 3)
    got = {}
    for concurrency in (1, 2):
        records = tmp_path / f"r{concurrency}.jsonl"
        n = await collect("smollm2-135m", data, 1, 2, records, judge=False, concurrency=concurrency, log=lambda m: None)
        assert n == 2
        got[concurrency] = {r["qid"]: r for r in load_records(records)}
    assert {r["engine"].split(":")[0] for r in got[1].values()} == {"single"}
    assert {r["engine"].split(":")[0] for r in got[2].values()} == {"batched"}
    assert all(r["concurrency"] == 2 for r in got[2].values())

    def content(r):
        return (
            r["tool"]["answer"],
            r["tool"]["generated_tokens"],
            r["cot"]["answer"],
            r["cot"]["generated_tokens"],
            [b["attc"]["confidence"] for b in r["tool"]["blocks"]],
        )

    assert {q: content(r) for q, r in got[2].items()} == {q: content(r) for q, r in got[1].items()}
