"""G-STEP on golden scripted trajectories: gate decisions, safety stops, prompts, duplicates, weights."""

from __future__ import annotations

import numpy as np
import pytest

from guards.chain import GuardChain
from guards.gstep.features import N_FEATURES
from guards.gstep.guard import GATE_OFF, Gate, GateError, GStep, shipped_weights
from kernels.base import CellResult, Output
from tuiagent.backends.scripted import ScriptedBackend, load_script
from tuiagent.core import events as ev
from tuiagent.core.loop import Agent
from tuiagent.eval.report import total
from tuiagent.protocol import (
    COMMIT,
    CONTINUE,
    Call,
    Gauge,
    RunRecord,
    RunSettings,
    RunView,
    Segment,
    Span,
    VerdictRecord,
)

CODE = "Half of 48 is 24, then add.\n```python\nprint(48 + 24)\n```\n```output\n"
CODE_AGAIN = "Let me recompute.\n```python\n# same thing\nprint( 48+24 )\n```\n```output\n"
CODE_NEW = "Maybe May was different.\n```python\nprint(48 + 48 / 2)\n```\n```output\n"
ANSWER = "So the total is \\boxed{72}."


def stdout(text: str) -> CellResult:
    return CellResult(outputs=(Output("stdout", text + "\n"),))


async def run(write_script, kernel, turns, settings: dict, *, run_settings: RunSettings | None = None):
    backend = ScriptedBackend(load_script(write_script(*turns)))
    chain = GuardChain({"gstep": settings}, {"gstep"})
    events = [e async for e in Agent(backend, kernel, guards=chain, settings=run_settings).stream("q", gold="72")]
    return events, backend


def verdicts(events, hook="on_answer"):
    return [e for e in events if isinstance(e, ev.GuardVerdict) and e.guard == "gstep" and e.hook == hook]


async def test_force_off_commits_a_reanswer_without_a_call_as_no_progress(write_script, canned_kernel, constant_gate):
    """force_call off, the earlier behaviour: an answer given again with no new call commits at once."""
    kernel = canned_kernel([stdout("72")])
    events, backend = await run(
        write_script, kernel, [CODE, ANSWER, ANSWER], {"weights": constant_gate(0.9), "force_call": False}
    )
    first, second = verdicts(events)
    assert first.action == CONTINUE and first.data["decision"] == "continue"
    assert first.data["p_continue"] == pytest.approx(0.9) and first.data["tau"] == 0.05
    assert "72" in first.text and "```python" in first.text  # the previous result, a call for a corrected block
    assert first.text in backend.prompts[2]  # the model saw the continue prompt after its answer
    # it answered again without a new tool call: no progress -> commit (safety stop)
    assert second.action == COMMIT and second.data["decision"] == "safety stop"
    assert "no progress" in second.data["reason"] and "forcing" not in second.data["reason"]
    assert [a.final for a in events if isinstance(a, ev.AnswerAttempt)] == [False, True]
    assert events[-1].reason == "answer" and events[-1].correct is True


async def test_a_second_reanswer_without_a_call_commits_after_the_one_forcing_prompt(
    write_script, canned_kernel, constant_gate
):
    events, backend = await run(
        write_script, canned_kernel([stdout("72")]), [CODE, ANSWER, ANSWER, ANSWER], {"weights": constant_gate(0.9)}
    )
    assert [v.data["decision"] for v in verdicts(events)] == ["continue", "force", "safety stop"]
    force, stop = verdicts(events)[1:]
    assert force.action == CONTINUE and force.text in backend.prompts[3] and "```python" in force.text
    assert "forcing prompt was given" in stop.data["reason"]
    assert verdicts(events)[0].data["extra_turns"] == force.data["extra_turns"] == 1  # a force is no extra continue
    assert (events[-1].reason, events[-1].answer) == ("answer", "72")


async def test_low_probability_commits(write_script, canned_kernel, constant_gate):
    events, _ = await run(write_script, canned_kernel([stdout("72")]), [CODE, ANSWER], {"weights": constant_gate(0.01)})
    (v,) = verdicts(events)
    assert v.action == COMMIT and v.data["decision"] == "commit" and v.data["p_continue"] == pytest.approx(0.01)
    assert "< tau" in v.reason and v.data["features"]["successful_calls"] == 1
    # a higher tau turns p = 0.2 into a commit as well, a lower one into a continue
    events, _ = await run(
        write_script,
        canned_kernel([stdout("72")]),
        [CODE, ANSWER],
        {"weights": constant_gate(0.2, name="h.npz"), "tau": 0.3},
    )
    assert verdicts(events)[0].action == COMMIT


async def test_progress_allows_more_continues_up_to_three_extra_turns(write_script, canned_kernel, constant_gate):
    outputs = [stdout(str(n)) for n in (70, 71, 74, 73)]  # no check confirms the answer 72
    turns = [
        CODE,
        ANSWER,
        CODE_NEW,
        ANSWER,
        CODE.replace("48 + 24", "24 + 48"),
        ANSWER,
        CODE_NEW.replace("48 + 48 / 2", "72 + 1"),
        ANSWER,
    ]
    events, _ = await run(
        write_script,
        canned_kernel(outputs),
        turns,
        {"weights": constant_gate(0.9)},
        run_settings=RunSettings(max_tool_calls=10),
    )
    decisions = [(v.action, v.data["extra_turns"]) for v in verdicts(events)]
    assert decisions == [(CONTINUE, 1), (CONTINUE, 2), (CONTINUE, 3), (COMMIT, 3)]
    assert "3 extra turns" in verdicts(events)[-1].data["reason"]


async def test_max_extra_turns_setting(write_script, canned_kernel, constant_gate):
    events, _ = await run(
        write_script,
        canned_kernel([stdout("70"), stdout("72")]),
        [CODE, ANSWER, CODE_NEW, ANSWER],
        {"weights": constant_gate(0.9), "max_extra_turns": 1},
    )
    assert [v.action for v in verdicts(events)] == [CONTINUE, COMMIT]


async def test_duplicate_block_is_not_run(write_script, canned_kernel, constant_gate):
    kernel = canned_kernel([stdout("72")])
    events, backend = await run(
        write_script, kernel, [CODE, ANSWER, CODE_AGAIN, ANSWER, ANSWER], {"weights": constant_gate(0.9)}
    )
    assert kernel.calls == ["print(48 + 24)"]  # the repeat (other spacing, a comment) never ran
    (dup,) = verdicts(events, "on_code")
    assert dup.action == "skip" and dup.data["decision"] == "duplicate" and dup.data["repeats_call"] == 1
    shown = [e for e in events if isinstance(e, ev.ToolResult)][-1]
    assert not shown.executed and shown.shown == dup.text and "72" in dup.text and "different" in dup.text
    assert dup.text in backend.prompts[3]
    # a skipped block is no tool call: the re-answer gets the forcing prompt, the next one commits
    assert [v.data["decision"] for v in verdicts(events)] == ["continue", "force", "safety stop"]
    assert "no progress" in verdicts(events)[-1].data["reason"]


async def test_no_duplicate_check_before_a_continue(write_script, canned_kernel, constant_gate):
    kernel = canned_kernel([stdout("72"), stdout("72")])
    events, _ = await run(write_script, kernel, [CODE, CODE_AGAIN, ANSWER], {"weights": constant_gate(0.01)})
    assert len(kernel.calls) == 2 and not verdicts(events, "on_code")


async def test_stagnating_outputs_get_the_replan_prompt(write_script, canned_kernel, constant_gate):
    kernel = canned_kernel([stdout("72"), stdout("72")])
    events, _ = await run(write_script, kernel, [CODE, CODE_AGAIN, ANSWER], {"weights": constant_gate(0.9)})
    v = verdicts(events)[0]
    assert v.action == CONTINUE and v.data["decision"] == "replan"
    assert "stale" in v.text and "plan" in v.text and "72" in v.text


async def test_equal_outputs_of_different_code_are_not_stagnation(write_script, canned_kernel, constant_gate):
    """Two different computations that print the same value agree; nothing is stale."""
    kernel = canned_kernel([stdout("72"), stdout("72")])
    events, _ = await run(write_script, kernel, [CODE, CODE_NEW, ANSWER], {"weights": constant_gate(0.9)})
    v = verdicts(events)[0]
    assert v.data["features"]["output_stagnation"] == 1.0  # the paper's feature is unchanged
    assert v.action == CONTINUE and v.data["decision"] == "continue" and "stale" not in v.text


async def test_an_independent_check_that_agrees_commits(write_script, canned_kernel, constant_gate):
    kernel = canned_kernel([stdout("72"), stdout("72")])
    events, _ = await run(write_script, kernel, [CODE, ANSWER, CODE_NEW, ANSWER], {"weights": constant_gate(0.9)})
    first, second = verdicts(events)
    assert first.action == CONTINUE
    assert second.action == COMMIT and second.data["decision"] == "commit"
    assert second.data["reason"] == "an independent check (call 2) agrees with the earlier answer"
    assert (events[-1].reason, events[-1].answer, events[-1].tool_calls) == ("answer", "72", 2)


async def test_a_check_that_disagrees_or_a_changed_answer_is_no_confirmation(
    write_script, canned_kernel, constant_gate
):
    gate = constant_gate(0.9)
    # the check prints another value: the gate decides again (continue)
    events, _ = await run(
        write_script,
        canned_kernel([stdout("72"), stdout("96")]),
        [CODE, ANSWER, CODE_NEW, ANSWER],
        {"weights": gate},
        run_settings=RunSettings(max_tool_calls=10),
    )
    assert [v.data["decision"] for v in verdicts(events)][:2] == ["continue", "continue"]
    # the check agrees with a new answer, not with the earlier one: no confirmation either
    events, _ = await run(
        write_script,
        canned_kernel([stdout("72"), stdout("96")]),
        [CODE, ANSWER, CODE_NEW, "So it is \\boxed{96}."],
        {"weights": gate},
        run_settings=RunSettings(max_tool_calls=10),
    )
    assert verdicts(events)[1].data["decision"] == "continue"


async def test_a_run_cut_off_after_a_continue_reports_its_last_answer_attempt(
    write_script, canned_kernel, constant_gate
):
    gate = constant_gate(0.9)
    more_code = "Check again.\n```python\nprint(2 * 36)\n```\n```output\n"
    cases = [  # (turns after the continue, run settings, how the run ends)
        ([CODE_NEW, more_code, more_code.replace("2 * 36", "3 * 24")], RunSettings(max_tool_calls=2), "tool_budget"),
        (["Hmm, let me think about it once more " * 200], RunSettings(max_tokens=300), "token_budget"),
        (["I am not sure any more.", "Still not sure."], RunSettings(), "no_answer"),  # the second after the force
    ]
    for after, settings, reason in cases:
        events, _ = await run(
            write_script,
            canned_kernel([stdout("72"), stdout("70")]),
            [CODE, ANSWER, *after],
            {"weights": gate},
            run_settings=settings,
        )
        fin = events[-1]
        assert (fin.reason, fin.answer, fin.correct) == (reason, "72", True), reason
        attempts = [(a.answer, a.final) for a in events if isinstance(a, ev.AnswerAttempt)]
        assert attempts == [("72", False), ("72", True)]


async def test_critic_variant_asks_for_words_first(write_script, canned_kernel, constant_gate):
    gate = constant_gate(0.9)
    plain, _ = await run(write_script, canned_kernel([stdout("72")]), [CODE, ANSWER, ANSWER], {"weights": gate})
    critic, _ = await run(
        write_script, canned_kernel([stdout("72")]), [CODE, ANSWER, ANSWER], {"weights": gate, "critic": True}
    )
    p, c = verdicts(plain)[0].text, verdicts(critic)[0].text
    assert "in words" not in p and "in words" in c
    assert c.index("in words") < c.rindex("```python")


async def test_tool_budget_stops_the_gate(write_script, canned_kernel, constant_gate):
    events, _ = await run(
        write_script,
        canned_kernel([stdout("72")]),
        [CODE, ANSWER],
        {"weights": constant_gate(0.9)},
        run_settings=RunSettings(max_tool_calls=1),
    )
    (v,) = verdicts(events)
    assert v.action == COMMIT and v.data["decision"] == "safety stop" and "budget" in v.data["reason"]
    assert v.data["p_continue"] == pytest.approx(0.9)  # shown even when a safety rule decides


def view(**kw) -> RunView:
    base = dict(
        problem="q",
        mode="tool",
        turn=2,
        turn_text="It is \\boxed{72}",
        turn_tokens=(),
        calls=(Call(call=1, turn=1, code="print(72)", output="72", error=False, timed_out=False),),
        segments=(Segment("prompt", "p"), Segment("model", "It is \\boxed{72}", 2)),
        max_tool_calls=4,
        tools_suspended=False,
    )
    return RunView(**{**base, **kw})


def test_never_forces_tools_when_suspended_or_in_cot(constant_gate):
    guard = GStep(GStep.Settings(weights=constant_gate(0.99)))
    v = guard.on_answer("72", view(tools_suspended=True))
    assert v.action == COMMIT and "suspended" in v.data["reason"]
    assert guard.on_answer("72", view(mode="cot")).action == COMMIT
    assert guard.on_answer("72", view()).action == CONTINUE  # the same state with tools available


def test_gate_off_shows_no_probability():
    """weights = off: no gate ran, so no verdict, card, compare cell or eval total shows a number."""
    guard = GStep(GStep.Settings(weights="off"))
    v = guard.on_answer("72", view())
    assert v.action == COMMIT and v.data == {"p_continue": None, "decision": "gate off", "reason": GATE_OFF}
    record = VerdictRecord(guard="gstep", hook="on_answer", action=v.action, reason=v.reason, data=v.data)
    # a record written before "gate off" existed says decision "commit" with p None: the same reading
    old = VerdictRecord(
        guard="gstep",
        hook="on_answer",
        action=COMMIT,
        reason="the gate is off (weights = off)",
        data={"p_continue": None, "tau": 0.05, "decision": "commit", "reason": "the gate is off"},
    )
    for r in (record, old):
        assert GStep.note(r) == GATE_OFF == "gate off (calibration: never continue)"
        shown = GStep.display(r)
        assert shown is not None and shown.place == "card"
        items = [item for line in shown.lines for item in line]
        assert not any(isinstance(i, Gauge) for i in items)
        text = " ".join(i.text for i in items if isinstance(i, Span))
        assert text == GATE_OFF and not any(ch.isdigit() for ch in text) and "τ" not in text
        run_ = RunRecord(pieces=(), verdicts=(r,), answer="72", gold="72", correct=True)
        assert GStep.metrics(run_) == {"gate": {"gate off": 1}, "gate_continues": GATE_OFF}
    # the eval's summary says so for a setting whose runs met the gate off, and counts otherwise
    assert total([{"gate_continues": GATE_OFF}, {"gate_continues": 0}], "gate_continues") == GATE_OFF
    assert total([{"gate_continues": 2}, {"gate_continues": 1}], "gate_continues") == 3


async def test_missing_or_corrupt_weights_turn_the_guard_off_visibly(write_script, canned_kernel, tmp_path):
    bad = tmp_path / "corrupt.npz"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, mean=np.array([object()], dtype=object))
    for weights, words in (
        (tmp_path / "missing.npz", "no G-STEP weights"),
        (bad, "not a readable"),
        (pickled, "not a readable"),
    ):
        with pytest.raises(GateError, match=words):
            GStep(GStep.Settings(weights=str(weights)))
        events, _ = await run(write_script, canned_kernel([stdout("72")]), [CODE, ANSWER], {"weights": str(weights)})
        toggled = [e for e in events if isinstance(e, ev.GuardToggled) and e.guard == "gstep"]
        assert toggled and not toggled[-1].enabled and words in toggled[-1].reason
        assert not verdicts(events) and events[-1].reason == "answer" and events[-1].answer == "72"


def test_wrong_width_is_refused(tmp_path):
    path = tmp_path / "narrow.npz"
    np.savez(path, mean=np.zeros(3), scale=np.ones(3), W0=np.zeros((3, 1)), b0=np.zeros(1))
    with pytest.raises(GateError, match="expects 3 features"):
        Gate.from_file(path)


def test_shipped_gate_loads_with_auto():
    if not shipped_weights().exists():
        pytest.skip("no shipped gate in this checkout")
    guard = GStep(GStep.Settings())
    assert guard.gate_path == shipped_weights() and guard.gate.n_features == N_FEATURES
    p = guard.on_answer("72", view()).data["p_continue"]
    assert 0.0 <= p <= 1.0
