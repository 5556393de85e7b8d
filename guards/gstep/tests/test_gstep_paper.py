"""G-STEP as the Tool-Use Tax paper evaluates it, on scripted runs through the real loop and a real
Jupyter kernel: the gate sees the state it was trained on whatever other guards do to the run,
warns when an input lies outside its training range, a continue gets its extra tool call, the gate
is asked at any final submission, and with the gate off nothing shows a probability."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import guards.gstep.guard as gstep_module
from guards.chain import GuardChain
from guards.gstep.features import NUMERIC_NAMES, features
from guards.gstep.guard import GATE_OFF, GStep, force_prompt, range_words, shipped_weights
from kernels.jupyter import JupyterKernel
from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.core import events as ev
from tuiagent.core.compare import verdict_note
from tuiagent.core.context import working_context
from tuiagent.core.loop import Agent
from tuiagent.eval.metrics import run_record
from tuiagent.eval.report import main_rows, summarize
from tuiagent.protocol import CONTINUE

PROBLEM = "Natalia sold 48 clips in April and half as many in May. How many clips did she sell in all?"
# The model forgets to define a name, fixes it, then answers: PruneTIR prunes the error once fixed.
E0 = "Half of 48 is May's count.\n```python\nprint(april + 48 / 2)\n```\n```output\n"
FIX = (
    "I forgot to define april. Let me define it and run again.\n```python\napril = 48\nprint(april + 48 / 2)\n"
    "del april  # a clean kernel for the next run\n```\n```output\n"
)
CODE = "Half of 48 is 24, then add.\n```python\nprint(48 + 24)\n```\n```output\n"
CHECK = "Check it another way.\n```python\nprint(2 * 36)\n```\n```output\n"
ANSWER = "So the total is \\boxed{72}."


@pytest.fixture
async def kernel(tmp_path: Path):
    async with JupyterKernel(images_dir=tmp_path / "images") as k:
        yield k


async def run(kernel, turns: list[str], configs: dict, backend: ScriptedBackend | None = None) -> list[ev.Event]:
    backend = backend or ScriptedBackend([split_tokens(t, -0.01) for t in turns])
    chain = GuardChain(configs, set(configs))
    return [e async for e in Agent(backend, kernel, guards=chain).stream(PROBLEM, gold="72")]


def gstep(events, hook: str = "on_answer") -> list[ev.GuardVerdict]:
    return [e for e in events if isinstance(e, ev.GuardVerdict) and e.guard == "gstep" and e.hook == hook]


def executed(events) -> list[ev.ToolResult]:
    return [e for e in events if isinstance(e, ev.ToolResult) and e.executed]


@pytest.mark.skipif(not shipped_weights().exists(), reason="no shipped gate in this checkout")
async def test_the_same_state_gives_the_same_p_with_and_without_prunetir(kernel, monkeypatch):
    """PruneTIR raises the run's tool budget (4 -> 9) and prunes the fixed error from the context;
    the gate still reads the run in its training frame, so the same state gets the same p."""
    captured = []
    original = gstep_module.gate_input_from_view
    monkeypatch.setattr(
        gstep_module, "gate_input_from_view", lambda v, budget: captured.append(original(v, budget)) or captured[-1]
    )
    shipped = {"tau": 1.0}  # the shipped gate; commit whatever it says, so both runs end at the same state
    alone = await run(kernel, [E0, FIX, ANSWER], {"gstep": shipped})
    both = await run(kernel, [E0, FIX, ANSWER], {"gstep": shipped, "prunetir": {}})
    budgets = [next(e for e in r if isinstance(e, ev.RunStarted)).settings["max_tool_calls"] for r in (alone, both)]
    assert budgets == [4, 9]
    assert not any(isinstance(e, ev.ContextPruned) for e in alone)
    assert [e.guard for e in both if isinstance(e, ev.ContextPruned)] == ["prunetir"]
    assert [e.error for e in executed(alone)] == [e.error for e in executed(both)] == [True, False]
    # the working context of the pruned run lacks the fix's prose; the gate reads the trajectory
    fix_prose = FIX.split("\n")[0]
    assert fix_prose in working_context(alone).text and fix_prose not in working_context(both).text
    (a,), (b,) = gstep(alone), gstep(both)
    assert a.data["p_continue"] == b.data["p_continue"] and a.data["features"] == b.data["features"]
    assert a.data["budget_frame"] == 4 and b.data["features"]["budget_remaining"] == 2  # 4 - 2 executed calls
    assert b.data["tool_calls_left"] == 7 and a.data["tool_calls_left"] == 2  # the safety rule uses the run's own
    # the same input, bar the kernel's cell number in the traceback (In[1] / In[3]), which no feature reads
    assert dataclasses.replace(captured[0], calls=()) == dataclasses.replace(captured[1], calls=())
    assert (features(captured[0]) == features(captured[1])).all() and fix_prose in captured[1].reasoning
    # the frame matters: the run's own budget (9 - 2 = 7 left) would give another p, outside the gate's range
    gate = GStep(GStep.Settings()).gate
    assert gate is not None
    in_run_frame = features(dataclasses.replace(captured[1], budget=7), gate.text_bins)
    assert float(gate.p_continue(in_run_frame)) != pytest.approx(b.data["p_continue"], rel=0.1)
    assert "budget_remaining" in (gate.outside(in_run_frame, 4.0) or {})


@pytest.mark.skipif(not shipped_weights().exists(), reason="no shipped gate in this checkout")
async def test_an_input_outside_the_training_range_warns(kernel):
    """The shipped gate's training runs met a tool error now and then (error_count 0.07 ± 0.50): a run
    with three gets its p, a warning in the verdict data (and so the trajectory) and a flagged card."""
    errors = [E0.replace("april +", f"{name} +") for name in ("april", "may", "june")]
    events = await run(kernel, [*errors, FIX, ANSWER], {"gstep": {"tau": 1.0}})
    (v,) = gstep(events)
    far = v.data["out_of_range"]
    gate = GStep(GStep.Settings()).gate
    assert gate is not None and gate.train_sd is not None
    i = NUMERIC_NAMES.index("error_count")
    assert far["error_count"] == {
        "value": 3.0,
        "mean": round(float(gate.mean[i]), 4),
        "sd": round(float(gate.train_sd[i]), 4),
    }
    assert abs(3.0 - gate.mean[i]) > 4 * gate.train_sd[i]  # the guard's rule: over 4 training sds away
    shown = GStep.display(v.record())
    assert shown is not None and shown.flagged
    text = " ".join(s.text for line in shown.lines for s in line if hasattr(s, "text"))
    assert f"⚠ outside the gate's training range: {range_words(far)}" in text
    assert "out of range" in GStep.note(v.record())
    # a run like the gate's training runs (a required first call, so no reasoning before it) records
    # an empty check, and the card does not warn
    typical = "```python\nprint(48 + 48 // 2)\n```\n```output\n"
    clean = await run(kernel, [typical, ANSWER], {"gstep": {"tau": 1.0}})
    (c,) = gstep(clean)
    assert c.data["out_of_range"] == {} and not GStep.display(c.record()).flagged


async def test_a_continue_answered_without_a_call_gets_one_forcing_prompt_and_the_call_runs(kernel, constant_gate):
    backend = ScriptedBackend([split_tokens(t, -0.01) for t in (CODE, ANSWER, ANSWER, CHECK, ANSWER)])
    events = await run(kernel, [], {"gstep": {"weights": constant_gate(0.9)}}, backend)
    assert [(v.action, v.data["decision"]) for v in gstep(events)] == [
        (CONTINUE, "continue"),
        (CONTINUE, "force"),
        ("commit", "commit"),
    ]
    force = gstep(events)[1]
    assert force.text == force_prompt(critic=False) and force.text in backend.prompts[3]
    assert "one more tool-conditioned step" in force.data["reason"]
    # the extra call ran in the kernel, after the forcing prompt
    assert [e.shown for e in executed(events)] == ["72", "72"]
    assert "agrees" in gstep(events)[-1].data["reason"]  # that call checked the answer sent back
    fin = events[-1]
    assert (fin.reason, fin.answer, fin.tool_calls) == ("answer", "72", 2)
    assert [(a.answer, a.final) for a in events if isinstance(a, ev.AnswerAttempt)] == [
        ("72", False),
        ("72", False),
        ("72", True),
    ]


async def test_a_final_text_without_boxed_consults_the_gate(kernel, constant_gate):
    """The paper's gate is asked whenever the model submits a final text without a tool call."""
    backend = ScriptedBackend([split_tokens(t, -0.01) for t in (CODE, "So she sold 72 clips.", CHECK, ANSWER)])
    events = await run(kernel, [], {"gstep": {"weights": constant_gate(0.9), "max_extra_turns": 1}}, backend)
    first, second = gstep(events)
    assert first.action == CONTINUE and first.data["p_continue"] == pytest.approx(0.9)
    assert first.text in backend.prompts[2]  # sent back for another turn
    assert first.data["features"]["pred_matches_last_success"] == 0  # no \boxed{}: no pred
    assert not any(isinstance(a, ev.AnswerAttempt) and not a.final for a in events)  # no answer was attempted
    assert second.data["decision"] == "safety stop" and "1 extra turns" in second.data["reason"]
    assert (events[-1].reason, events[-1].answer, events[-1].tool_calls) == ("answer", "72", 2)
    from tuiagent.ui.widgets.guard_card import GuardCard

    card = GuardCard(first.turn, "gstep", GStep.display(first.record()), answer=None).render().plain
    assert "final submission without \\boxed{}" in card and "?" not in card.splitlines()[0]
    # a low p commits the unboxed text: the run ends without an answer, as before, but the gate was asked
    events = await run(kernel, [CODE, "So she sold 72 clips."], {"gstep": {"weights": constant_gate(0.01)}})
    (v,) = gstep(events)
    assert v.data["decision"] == "commit" and events[-1].reason == "no_answer"


async def test_the_gate_off_card_compare_and_eval_show_no_probability(kernel):
    """The shipped calibration sets weights = off: the card, the compare cell and the eval say so."""
    from tuiagent.ui.widgets.guard_card import GuardCard

    events = await run(kernel, [CODE, ANSWER], {"gstep": {"weights": "off"}})
    (v,) = gstep(events)
    assert v.data == {"p_continue": None, "decision": "gate off", "reason": GATE_OFF}
    card = GuardCard(v.turn, "gstep", GStep.display(v.record()), answer="72").render().plain
    assert GATE_OFF in card and "p(continue)" not in card and "τ" not in card and "0.0" not in card
    assert verdict_note(v).text == GATE_OFF
    record = run_record(events)
    assert record["gate"] == {"gate off": 1} and record["gate_continues"] == GATE_OFF
    summary = summarize([{**record, "setting": "gstep", "dataset": "d", "problem_id": 1, "seed": 0}])
    assert GATE_OFF in main_rows(summary, "d")[0]
