"""PruneTIR on golden scripted trajectories with canned kernel results (docs/papers/prunetir.md, "PruneTIR");
RTTS's span and the tool's return also through the real kernel."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import guards.chain as chain_mod
from guards.base import SettingsError, parse_settings
from guards.chain import GuardChain
from guards.prunetir.guard import (
    RTTS_NOTE,
    RTTS_NOTE_REST,
    PruneTIR,
    PruneTIRSettings,
    code_jaccard,
    failing_statement,
    intent_shifted,
)
from kernels.base import CellResult, Output
from kernels.jupyter import JupyterKernel
from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.core import events as ev
from tuiagent.core.context import working_context
from tuiagent.core.fork import fork_point
from tuiagent.core.loop import Agent, resample_sampling
from tuiagent.core.prompts import TOOLS_BACK_NOTE
from tuiagent.core.steps import run_metrics
from tuiagent.core.trajectory import Recorder, load
from tuiagent.protocol import INJECT, SUSPEND, RunSettings, Verdict, VerdictRecord, tools_return_turn

PROBLEM = "What is the sum of k^2 for k = 1..10?"
WIDE = RunSettings(max_tool_calls=30)


def turn(prose: str, code: str) -> str:
    return f"{prose}\n```python\n{code}\n```\n```output\n"


def tb(name: str, message: str, code: str, line: int, cell: int = 1) -> str:
    """An IPython-style traceback, as the Jupyter kernel reports it (ANSI stripped)."""
    lines = code.splitlines()
    body = "\n".join(("----> " if i == line else "      ") + f"{i} {t}" for i, t in enumerate(lines, 1))
    return (
        f"{'-' * 75}\n{name}{' ' * 33}Traceback (most recent call last)\nCell In[{cell}], line {line}\n"
        f"{body}\n\n{name}: {message}"
    )


def err(name: str, message: str, code: str, line: int = 1, **kw) -> CellResult:
    return CellResult(outputs=(Output("error", tb(name, message, code, line)),), error=True, error_name=name, **kw)


def ok(text: str) -> CellResult:
    return CellResult(outputs=(Output("stdout", text + "\n"),))


def timeout(code: str, *, error: bool = True) -> CellResult:
    text = tb("KeyboardInterrupt", "", code, 1) + "\nExecution timed out after 5 s and was interrupted."
    return CellResult(outputs=(Output("error", text),), error=error, timed_out=True, error_name="KeyboardInterrupt")


class RecordingBackend(ScriptedBackend):
    """Scripted backend that also records the sampling of every turn."""

    def __init__(self, turns: list[str]):
        super().__init__([split_tokens(t, -0.01) for t in turns])
        self.samplings = []

    def stream(self, prompt, sampling, stop):
        self.samplings.append(sampling)
        return super().stream(prompt, sampling, stop)


def chain(**settings) -> GuardChain:
    return GuardChain({"prunetir": settings}, {"prunetir"})


async def run(backend, kernel, guards, settings: RunSettings = WIDE) -> list[ev.Event]:
    return [e async for e in Agent(backend, kernel, guards=guards, settings=settings).stream(PROBLEM)]


def verdicts(events, guard: str = "prunetir") -> list[ev.GuardVerdict]:
    return [e for e in events if isinstance(e, ev.GuardVerdict) and e.guard == guard]


# The NameError scenario: e0 uses an undefined bound, the first retry defines it.
E0_PROSE = "I add the squares of 1..N with N = 10."
E0_CODE = "total = sum(k * k for k in range(1, N + 1))\nprint(total)"
FIX_PROSE = "Oops, N was never defined. I define it and run the sum again."
FIX_CODE = "N = 10\ntotal = sum(k * k for k in range(1, N + 1))\nprint(total)"
ANSWER = "The sum is 385.\n\\boxed{385}"


# -- STP ----------------------------------------------------------------------------------------


async def test_stp_prunes_a_fixed_error_from_the_next_prompt(canned_kernel):
    backend = RecordingBackend([turn(E0_PROSE, E0_CODE), turn(FIX_PROSE, FIX_CODE), ANSWER])
    kernel = canned_kernel([err("NameError", "name 'N' is not defined", E0_CODE), ok("385")])
    events = await run(backend, kernel, chain())

    # what the model saw next: e0's reasoning, then the successful call and its output, nothing else
    assert backend.prompts[2] == (
        backend.prompts[0] + E0_PROSE + "\n" + f"```python\n{FIX_CODE}\n```\n" + "```output\n385\n```\n"
    )
    assert "NameError" not in backend.prompts[2] and FIX_PROSE not in backend.prompts[2]
    assert f"```python\n{E0_CODE}" not in backend.prompts[2]
    assert f"```python\n{E0_CODE}" in backend.prompts[1] and "NameError" in backend.prompts[1]  # before the prune

    flag, prune = verdicts(events)
    assert flag.action == "flag" and flag.data["episode"] == 1 and flag.data["attempts"] == 0
    assert prune.action == "prune" and prune.hook == "on_tool_result"
    d = prune.data
    assert (d["episode"], d["attempts"], d["pruned_calls"], d["intent_shift"]) == (1, 1, [1], False)
    assert d["shares_failing_statement"] is True
    assert d["failing_statement"] == "total = sum(k * k for k in range(1, N + 1))"
    assert d["jaccard"] >= 0.5 and d["kept_segments"] == [0, 1, 5, 6] and d["removed_segments"] == [2, 3, 4]
    pruned = [e for e in events if isinstance(e, ev.ContextPruned)]
    assert len(pruned) == 1 and pruned[0].keep == [0, 1, 5, 6] and pruned[0].guard == "prunetir"
    assert "NameError" in pruned[0].removed_text and FIX_PROSE in pruned[0].removed_text
    assert d["wtn_saved_chars"] == len(pruned[0].removed_text)

    # the trajectory keeps everything; the fold gives the pruned context
    first_lines = [e.text.split("\n")[0] for e in events if isinstance(e, ev.TurnEnded)]
    assert first_lines == [E0_PROSE, FIX_PROSE, "The sum is 385."]
    assert [e.error for e in events if isinstance(e, ev.ToolResult)] == [True, False]
    starts = [i for i, e in enumerate(events) if isinstance(e, ev.TurnStarted)]
    assert [working_context(events[:i]).text for i in starts] == backend.prompts
    fin = events[-1]
    assert (fin.reason, fin.answer, fin.tool_calls, fin.erroneous_calls) == ("answer", "385", 2, 1)
    assert fin.context_tokens == backend.count_tokens(working_context(events).text)
    m = run_metrics(events, backend.count_tokens)
    assert (m["tcn"], m["wtn"], m["erroneous"], m["stp"], m["stpr"], m["rtts"]) == (2, fin.context_tokens, 1, 1, 0, 0)


async def test_without_the_guard_nothing_is_pruned(canned_kernel):
    backend = RecordingBackend([turn(E0_PROSE, E0_CODE), turn(FIX_PROSE, FIX_CODE), ANSWER])
    kernel = canned_kernel([err("NameError", "name 'N' is not defined", E0_CODE), ok("385")])
    events = await run(backend, kernel, None)
    assert "NameError" in backend.prompts[2] and FIX_PROSE in backend.prompts[2]
    m = run_metrics(events, backend.count_tokens)
    assert (m["tcn"], m["stp"]) == (2, 0) and m["wtn"] == events[-1].context_tokens


SHIFT_E0 = "import sympy as sp\npts = sp.lattice_points_in_circle(10)\nprint(len(pts))"
SHIFT_TRY = "from sympy.geometry import lattice_points_in_circle\npts = lattice_points_in_circle(10)\nprint(len(pts))"
SHIFT_NEW_PROSE = "There is no such helper. Instead I count column by column with isqrt."
SHIFT_NEW = "import math\ntotal = sum(2 * math.isqrt(100 - a * a) + 1 for a in range(-10, 11))\nprint(total)"


async def test_intent_shift_keeps_the_new_strategy(canned_kernel):
    backend = RecordingBackend(
        [
            turn("I let sympy list the lattice points.", SHIFT_E0),
            turn("Maybe it lives in sympy.geometry.", SHIFT_TRY),
            turn(SHIFT_NEW_PROSE, SHIFT_NEW),
            "\\boxed{317}",
        ]
    )
    kernel = canned_kernel(
        [
            err("AttributeError", "module 'sympy' has no attribute 'lattice_points_in_circle'", SHIFT_E0, 2),
            err("ImportError", "cannot import name 'lattice_points_in_circle'", SHIFT_TRY, 1),
            ok("317"),
        ]
    )
    events = await run(backend, kernel, chain())
    prune = verdicts(events)[-1]
    assert prune.action == "prune" and prune.data["intent_shift"] is True
    assert prune.data["shares_failing_statement"] is False and prune.data["jaccard"] < 0.5
    assert prune.data["pruned_calls"] == [1, 2] and prune.data["attempts"] == 2
    assert backend.prompts[3] == (
        backend.prompts[0]
        + "I let sympy list the lattice points.\n"
        + SHIFT_NEW_PROSE
        + "\n"
        + f"```python\n{SHIFT_NEW}\n```\n```output\n317\n```\n"
    )


SHIFT_TYPO = SHIFT_NEW.replace("math.isqrt", "mth.isqrt")
SHIFT_FIX_PROSE = "Typo: the module is math."


async def test_an_intent_shift_on_an_earlier_turn_of_the_episode_keeps_that_turns_reasoning(canned_kernel):
    """The model switches strategy on the first resolution turn, that new block fails on a typo, and
    the next turn fixes the typo: the new strategy's reasoning is the switch turn's, not the fix-up's."""
    backend = RecordingBackend(
        [
            turn("I let sympy list the lattice points.", SHIFT_E0),
            turn(SHIFT_NEW_PROSE, SHIFT_TYPO),
            turn(SHIFT_FIX_PROSE, SHIFT_NEW),
            "\\boxed{317}",
        ]
    )
    kernel = canned_kernel(
        [
            err("AttributeError", "module 'sympy' has no attribute 'lattice_points_in_circle'", SHIFT_E0, 2),
            err("NameError", "name 'mth' is not defined", SHIFT_TYPO, 2),
            ok("317"),
        ]
    )
    events = await run(backend, kernel, chain())
    prune = verdicts(events)[-1]
    assert prune.action == "prune" and prune.data["intent_shift"] is True and prune.data["kept_new_strategy"] is True
    assert prune.data["new_strategy_call"] == 2 and prune.data["pruned_calls"] == [1, 2]
    assert backend.prompts[3] == (
        backend.prompts[0]
        + "I let sympy list the lattice points.\n"
        + SHIFT_NEW_PROSE
        + "\n"
        + f"```python\n{SHIFT_NEW}\n```\n```output\n317\n```\n"
    )
    assert SHIFT_FIX_PROSE not in backend.prompts[3] and "mth" not in backend.prompts[3]


async def test_no_intent_shift_drops_the_fix_up_text_and_the_test_is_swappable(canned_kernel):
    def run_with(swap):
        backend = RecordingBackend([turn(E0_PROSE, E0_CODE), turn(FIX_PROSE, FIX_CODE), ANSWER])
        kernel = canned_kernel([err("NameError", "name 'N' is not defined", E0_CODE), ok("385")])
        guards = chain()
        if swap:
            guards.instances["prunetir"].intent_test = lambda e0_code, e0_output, success_code: True
        return backend, run(backend, kernel, guards)

    backend, coro = run_with(False)
    events = await coro
    assert verdicts(events)[-1].data["intent_shift"] is False and FIX_PROSE not in backend.prompts[2]
    backend, coro = run_with(True)
    events = await coro
    assert verdicts(events)[-1].data["intent_shift"] is True
    assert backend.prompts[2] == (
        backend.prompts[0] + E0_PROSE + "\n" + FIX_PROSE + "\n" + f"```python\n{FIX_CODE}\n```\n```output\n385\n```\n"
    )


async def test_timeout_counts_as_an_error(canned_kernel):
    slow = "count = sum(1 for n in range(10**10) if n % 7 == 3)\nprint(count)"
    fast = "count = (10**10 - 3 + 6) // 7\nprint(count)"
    for result in (timeout(slow), timeout(slow, error=False)):  # the kernel sets both; a timeout alone suffices
        backend = RecordingBackend(
            [turn("Brute force.", slow), turn("Too slow; count arithmetically.", fast), "\\boxed{1}"]
        )
        events = await run(backend, canned_kernel([result, ok("1428571429")]), chain())
        flag, prune = verdicts(events)
        assert flag.data["timed_out"] is True and prune.action == "prune" and prune.data["pruned_calls"] == [1]
        assert "timed out" not in backend.prompts[2]


# -- STPR ---------------------------------------------------------------------------------------

PRE = turn("First I compute the base value.", "base = 7\nprint(base)")
STUCK = [f"import math\nprint(math.magic_{i}(base))" for i in range(12)]


def stuck_results(codes):
    return [err("AttributeError", f"module 'math' has no attribute 'magic_{i}'", c, 2) for i, c in enumerate(codes)]


async def test_stpr_resamples_e0s_turn_at_the_turn_limit(canned_kernel):
    turns = (
        [PRE]
        + [turn(f"Attempt {i}.", STUCK[i]) for i in range(4)]
        + [turn("Resampled: plain arithmetic.", "print(base * 6)"), "\\boxed{42}"]
    )
    backend = RecordingBackend(turns)
    kernel = canned_kernel([ok("7")] + stuck_results(STUCK[:4]) + [ok("42")])
    events = await run(backend, kernel, chain(resample_seed=3))

    # turns: 1 ok, 2 = e0, 3..5 = attempts 1..3 (all fail) -> STPR; turn 6 is the resample
    assert backend.prompts[5] == backend.prompts[1]  # the prompt that produced e0's turn
    s = backend.samplings
    assert all(x.temperature == 0.0 and x.seed is None for x in s[:5])
    assert s[5].temperature == 0.7 and s[5].seed is not None
    assert s[6].temperature == 0.0 and s[6].seed is None  # a resample applies to one turn only

    vs = verdicts(events)
    assert [v.action for v in vs] == ["flag", "flag", "flag", "resample"]
    assert [v.data["attempts"] for v in vs] == [0, 1, 2, 3]
    r = vs[-1]
    assert r.data["stuck_in_a_row"] == 1 and r.data["stpr"] is True and r.data["rtts"] is False
    assert r.data["pruned_calls"] == [2, 3, 4, 5] and r.data["erroneous_calls"] == [2, 3, 4, 5]
    assert r.data["sampling"] == {"temperature": 0.7, "seed": s[5].seed}
    cut = [e for e in events if isinstance(e, ev.ContextPruned)]
    assert (
        len(cut) == 1 and cut[0].truncate_to == r.data["truncate_to"] == 4
    )  # after prompt, turn 1 prose, code, output
    assert "Attempt 0." in cut[0].removed_text and "magic_3" in cut[0].removed_text

    fin = events[-1]
    # TCN counts the resampled (truncated) calls too
    assert (fin.reason, fin.answer, fin.tool_calls, fin.erroneous_calls) == ("answer", "42", 6, 4)
    m = run_metrics(events, backend.count_tokens)
    assert (m["tcn"], m["stpr"], m["wtn"]) == (6, 1, fin.context_tokens)
    assert "magic" not in working_context(events).text


@pytest.mark.parametrize("limit", [1, 2])
async def test_turn_limit_setting(canned_kernel, limit):
    turns = [turn(f"Attempt {i}.", STUCK[i]) for i in range(limit + 1)] + ["\\boxed{0}"]
    events = await run(
        RecordingBackend(turns), canned_kernel(stuck_results(STUCK[: limit + 1])), chain(turn_limit=limit)
    )
    vs = verdicts(events)
    assert [v.action for v in vs] == ["flag"] * limit + ["resample"]
    assert vs[-1].data["attempts"] == limit and vs[-1].data["turn_limit"] == limit


# -- RTTS ---------------------------------------------------------------------------------------


async def test_rtts_after_retry_limit_stprs_in_a_row(canned_kernel):
    turns = [turn(f"Try {i}.", STUCK[i]) for i in range(8)] + [
        turn("Let me still try code.", "print(base)"),
        "By hand the value is 42.\n\\boxed{42}",
    ]
    backend = RecordingBackend(turns)
    kernel = canned_kernel(stuck_results(STUCK[:8]))
    events = await run(backend, kernel, chain(resample_seed=11))

    vs = verdicts(events)
    assert [v.action for v in vs] == ["flag"] * 3 + ["resample"] + ["flag"] * 3 + ["suspend"]
    assert vs[4].data["episode"] == 2 and vs[4].data["attempts"] == 0 and vs[4].data["e0_call"] == 5  # state reset
    sus = vs[-1]
    assert sus.data["stuck_in_a_row"] == 2 and sus.data["stpr"] is True and sus.data["rtts"] is True
    assert sus.data["truncate_to"] == 1 and sus.text == RTTS_NOTE
    # turn 9 is resampled from the context before e0's turn plus the note, with a fresh seed
    assert backend.prompts[8] == backend.prompts[0] + RTTS_NOTE
    assert backend.prompts[4] == backend.prompts[0]
    seeds = [backend.samplings[4].seed, backend.samplings[8].seed]
    assert None not in seeds and seeds[0] != seeds[1] and backend.samplings[8].temperature == 0.7
    notes = [e for e in events if isinstance(e, ev.ContextAppended) and e.source == "prunetir"]
    assert len(notes) == 1 and "not available" in notes[0].text
    # no code runs after the suspension
    assert len(kernel.calls) == 8
    skipped = [e for e in events if isinstance(e, ev.ToolResult) and not e.executed]
    assert len(skipped) == 1 and "unavailable" in skipped[0].shown
    fin = events[-1]
    assert (fin.answer, fin.tool_calls) == ("42", 8)
    m = run_metrics(events)
    assert (m["tcn"], m["stpr"], m["rtts"], m["stp"]) == (8, 2, 1, 0)


async def test_rtts_for_the_rest_of_the_run_when_the_span_is_none(canned_kernel):
    turns = [turn(f"Try {i}.", STUCK[i]) for i in range(8)] + [turn("Code?", "print(1)")] * 5 + ["\\boxed{42}"]
    kernel = canned_kernel(stuck_results(STUCK[:8]))
    events = await run(RecordingBackend(turns), kernel, chain(suspend_turns=None))
    sus = verdicts(events)[-1]
    assert sus.action == "suspend" and sus.data["suspend_turns"] is None and sus.text == RTTS_NOTE_REST
    assert "rest of the run" in sus.reason and len(kernel.calls) == 8
    assert not any(isinstance(e, ev.Notice) and "is back" in e.message for e in events)
    assert PruneTIR.display(sus.record()).title == "⚠ RTTS: the tool is suspended from here on"


def test_a_suspension_recorded_before_spans_lasts_the_run():
    """Old trajectories: a suspend verdict without ``suspend_turns`` reads as before (no return)."""
    old = VerdictRecord(
        "prunetir",
        "on_tool_result",
        SUSPEND,
        reason="STPR #2 in a row + RTTS",
        turn=8,
        data={"stuck_in_a_row": 2, "rtts": True},
    )
    assert tools_return_turn(old.turn, old.data) is None
    assert PruneTIR.display(old).title == "⚠ RTTS: the tool is suspended from here on"
    assert tools_return_turn(8, {"suspend_turns": 3}) == 12


# -- RTTS's span, through the real kernel ---------------------------------------------------------

REFUSED = turn("I still want to check with code.", "print('checking')")
BACK = turn("The tool is back, so I compute it.", "print(6 * 7)")


@pytest.fixture
async def kernel(tmp_path: Path):
    async with JupyterKernel(images_dir=tmp_path / "images") as k:
        yield k


def rtts_turns() -> list[str]:
    """8 erroneous calls (STPR, then STPR + RTTS at turn 8), 3 turns refused, a block that runs, the answer."""
    return [turn(f"Try {i}.", STUCK[i]) for i in range(8)] + [REFUSED] * 3 + [BACK, "So \\boxed{42}."]


async def test_real_kernel_the_tool_comes_back_after_rttss_span(kernel):
    backend = RecordingBackend(rtts_turns())
    events = await run(backend, kernel, chain(), RunSettings())  # the default budget, raised to 9 calls
    sus = verdicts(events)[-1]
    assert (sus.action, sus.turn, sus.data["suspend_turns"], sus.text) == ("suspend", 8, 3, RTTS_NOTE)
    assert "tool suspended for 3 turn(s)" in sus.reason
    assert PruneTIR.display(sus.record()).title == "⚠ RTTS: the tool is suspended for 3 turns, back at turn 12"

    results = [e for e in events if isinstance(e, ev.ToolResult)]
    assert [r.executed for r in results] == [True] * 8 + [False] * 3 + [True]
    assert all("unavailable" in r.shown for r in results[8:11]) and results[-1].shown == "42"
    # the return is in the trajectory just before turn 12 starts, and in the model's context
    i = next(i for i, e in enumerate(events) if isinstance(e, ev.TurnStarted) and e.turn == 12)
    notice, note = events[i - 2], events[i - 1]
    assert (
        isinstance(notice, ev.Notice)
        and notice.message == "the tool is back from turn 12: prunetir's suspension is over"
    )
    assert isinstance(note, ev.ContextAppended) and (note.text, note.source) == (TOOLS_BACK_NOTE, "prunetir")
    assert backend.prompts[11].endswith(
        "```output\nThe tool is unavailable: continue by reasoning step by step "
        "and give the answer in \\boxed{}.\n```\n" + TOOLS_BACK_NOTE
    )
    fin = events[-1]
    assert (fin.reason, fin.answer, fin.tool_calls) == ("answer", "42", 9)
    assert run_metrics(events)["rtts"] == 1


async def test_real_kernel_a_fork_after_the_return_keeps_the_tool(kernel, tmp_path):
    """Forked at the step before turn 12, the prefix holds the return: the fork runs code without a second note."""
    path = tmp_path / "parent.jsonl"
    with Recorder(path) as recorder:
        agent = Agent(RecordingBackend(rtts_turns()), kernel, guards=chain(), recorder=recorder)
        [e async for e in agent.stream(PROBLEM)]
    await kernel.restart()
    point = fork_point(load(path).events, 11, path)
    agent = Agent(RecordingBackend([BACK, "So \\boxed{42}."]), kernel, guards=chain())
    forked = [e async for e in agent.stream(PROBLEM, fork=point)]
    assert [e.text for e in forked if isinstance(e, ev.ContextAppended)].count(TOOLS_BACK_NOTE) == 1
    last = [e for e in forked if isinstance(e, ev.ToolResult)][-1]
    assert last.executed and last.shown == "42" and forked[-1].answer == "42"


async def test_a_success_between_stuck_episodes_breaks_the_row(canned_kernel):
    turns = (
        [turn(f"Try {i}.", STUCK[i]) for i in range(4)]
        + [PRE]
        + [turn(f"Try {i}.", STUCK[i]) for i in range(4, 8)]
        + ["\\boxed{7}"]
    )
    kernel = canned_kernel(stuck_results(STUCK[:4]) + [ok("7")] + stuck_results(STUCK[4:8]))
    events = await run(RecordingBackend(turns), kernel, chain())
    actions = [v.action for v in verdicts(events)]
    assert actions.count("resample") == 2 and "suspend" not in actions
    assert [v.data["stuck_in_a_row"] for v in verdicts(events) if v.action == "resample"] == [1, 1]


# -- switches -----------------------------------------------------------------------------------


async def test_stp_off_keeps_the_error(canned_kernel):
    backend = RecordingBackend([turn(E0_PROSE, E0_CODE), turn(FIX_PROSE, FIX_CODE), ANSWER])
    kernel = canned_kernel([err("NameError", "name 'N' is not defined", E0_CODE), ok("385")])
    events = await run(backend, kernel, chain(stp=False))
    assert [v.action for v in verdicts(events)] == ["flag", "flag"]
    assert not any(isinstance(e, ev.ContextPruned) for e in events) and "NameError" in backend.prompts[2]


async def test_stpr_off_no_resample(canned_kernel):
    turns = [turn(f"Try {i}.", STUCK[i]) for i in range(8)] + ["\\boxed{0}"]
    backend = RecordingBackend(turns)
    events = await run(backend, canned_kernel(stuck_results(STUCK[:8])), chain(stpr=False, rtts=False))
    assert [v.action for v in verdicts(events)] == ["flag"] * 8
    assert verdicts(events)[3].data["stpr"] is False
    assert not any(isinstance(e, ev.ContextPruned) for e in events)
    assert all(s.seed is None for s in backend.samplings)


async def test_stpr_off_rtts_on_suspends_without_truncating(canned_kernel):
    turns = [turn(f"Try {i}.", STUCK[i]) for i in range(9)] + ["\\boxed{0}"]
    kernel = canned_kernel(stuck_results(STUCK[:9]))
    events = await run(RecordingBackend(turns), kernel, chain(stpr=False))
    vs = verdicts(events)
    assert [v.action for v in vs] == ["flag"] * 7 + ["suspend"]
    assert vs[-1].data["stpr"] is False and "truncate_to" not in vs[-1].data
    assert not any(isinstance(e, ev.ContextPruned) for e in events) and len(kernel.calls) == 8


async def test_rtts_off_resamples_every_time(canned_kernel):
    turns = [turn(f"Try {i}.", STUCK[i]) for i in range(12)] + ["\\boxed{0}"]
    kernel = canned_kernel(stuck_results(STUCK[:12]))
    events = await run(RecordingBackend(turns), kernel, chain(rtts=False))
    vs = verdicts(events)
    assert [v.action for v in vs if v.action != "flag"] == ["resample"] * 3
    assert [v.data["stuck_in_a_row"] for v in vs if v.action == "resample"] == [1, 2, 3]
    assert len(kernel.calls) == 12


# -- order with ATTC ----------------------------------------------------------------------------


@dataclass
class _NoSettings:
    pass


class FakeATTCGuard:
    """Stands in for ATTC (order 30): one sentence after every tool result."""

    name, order, Settings = "attc", 30, _NoSettings

    def __init__(self, settings):
        self.settings = settings

    def on_tool_result(self, call, view):
        return Verdict(INJECT, text=f"ATTC sentence after call {call.call}.", data={"call": call.call})


@pytest.fixture
def with_fake_attc(monkeypatch):
    real = chain_mod.guard_class
    monkeypatch.setattr(chain_mod, "guard_class", lambda name: FakeATTCGuard if name == "attc" else real(name))


def both(**settings) -> GuardChain:
    return GuardChain({"prunetir": settings, "attc": {}}, {"prunetir", "attc"})


async def test_prunetir_speaks_before_attc_and_a_resample_silences_it(canned_kernel, with_fake_attc):
    turns = [turn(f"Try {i}.", STUCK[i]) for i in range(4)] + [turn("Resampled.", "print(42)"), "\\boxed{42}"]
    kernel = canned_kernel(stuck_results(STUCK[:4]) + [ok("42")])
    events = await run(RecordingBackend(turns), kernel, both())
    seen = [(e.guard, e.action, e.data.get("call")) for e in events if isinstance(e, ev.GuardVerdict)]
    assert seen == [
        ("prunetir", "flag", 1),
        ("attc", "inject", 1),
        ("prunetir", "flag", 2),
        ("attc", "inject", 2),
        ("prunetir", "flag", 3),
        ("attc", "inject", 3),
        ("prunetir", "resample", 4),  # the chain stops: no ATTC sentence about a call that is gone
        ("attc", "inject", 5),
    ]


async def test_stp_prunes_attc_sentences_of_the_episode(canned_kernel, with_fake_attc):
    backend = RecordingBackend([turn(E0_PROSE, E0_CODE), turn(FIX_PROSE, FIX_CODE), ANSWER])
    kernel = canned_kernel([err("NameError", "name 'N' is not defined", E0_CODE), ok("385")])
    events = await run(backend, kernel, both())
    seen = [(e.guard, e.action) for e in events if isinstance(e, ev.GuardVerdict)]
    assert seen == [("prunetir", "flag"), ("attc", "inject"), ("prunetir", "prune"), ("attc", "inject")]
    assert "after call 1" in backend.prompts[1] and "after call 1" not in backend.prompts[2]
    assert backend.prompts[2].endswith("```output\n385\n```\nATTC sentence after call 2.\n")


async def test_rtts_truncation_also_silences_attc(canned_kernel, with_fake_attc):
    turns = [turn(f"Try {i}.", STUCK[i]) for i in range(2)] + ["\\boxed{0}"]
    events = await run(
        RecordingBackend(turns), canned_kernel(stuck_results(STUCK[:2])), both(turn_limit=1, retry_limit=1)
    )
    seen = [(e.guard, e.action) for e in events if isinstance(e, ev.GuardVerdict)]
    assert seen == [("prunetir", "flag"), ("attc", "inject"), ("prunetir", "suspend")]


# -- pieces -------------------------------------------------------------------------------------

IPY_ZERO = (
    "---------------------------------------------------------------------------\n"
    "ZeroDivisionError                         Traceback (most recent call last)\n"
    "Cell In[2], line 6\n      2     return a / b\n      3 \n      4 total = 0\n      5 for i in range(3):\n"
    "----> 6     total += f(10, i)\n      7 print(total)\n\n"
    "Cell In[2], line 2, in f(a, b)\n      1 def f(a, b):\n----> 2     return a / b\n\n"
    "ZeroDivisionError: division by zero"
)
ZERO_CODE = "def f(a, b):\n    return a / b\n\ntotal = 0\nfor i in range(3):\n    total += f(10, i)\nprint(total)"


def test_failing_statement_reads_the_traceback():
    assert failing_statement(ZERO_CODE, IPY_ZERO) == "return a / b"
    # a frame in an earlier cell (a function defined there) is not e0's own line
    other = (
        "Cell In[5], line 1\n----> 1 g(0)\n\nCell In[2], line 2, in g(x)\n----> 2     return 1 / x\n\nZeroDivisionError"
    )
    assert failing_statement("g(0)", other) == "g(0)"
    assert failing_statement("x = 1\ny = x +", "SyntaxError: incomplete input") == "y = x +"  # unknown: last line
    assert failing_statement("x = 1\nprint(y)", '  File "<string>", line 2\nNameError') == "print(y)"


def test_intent_test_and_jaccard():
    fixed = ZERO_CODE.replace("range(3)", "range(1, 3)")
    assert not intent_shifted(ZERO_CODE, IPY_ZERO, fixed)
    other = "import math\nprint(math.fsum(10 / k for k in (1, 2)))"
    assert intent_shifted(ZERO_CODE, IPY_ZERO, other)
    assert code_jaccard("a = 1", "a = 1") == 1.0 and code_jaccard("a = 1", "b = 2") == 0.0
    assert code_jaccard("if x:\n  y = (", "if x: y") == 1.0  # broken code falls back to a regex; keywords ignored
    # the statement alone keeps the intent, whatever the Jaccard
    assert not intent_shifted(ZERO_CODE, IPY_ZERO, "u, v, w = 1, 2, 3\nreturn a / b", jaccard_min=0.99)


def test_settings_are_documented_and_checked():
    tags = {f.name: f.metadata["tag"] for f in dataclasses.fields(PruneTIRSettings)}
    assert (
        tags["turn_limit"] == tags["retry_limit"] == tags["intent_jaccard"] == tags["resample_temperature"] == "default"
    )
    assert tags["suspend_turns"] == "default" and PruneTIRSettings().suspend_turns == 3  # [ours]
    assert parse_settings(PruneTIRSettings, {"suspend_turns": "none"}, guard="prunetir").suspend_turns is None
    assert PruneTIRSettings().turn_limit == 3 and PruneTIRSettings().retry_limit == 2
    assert PruneTIRSettings().resample_temperature > 0 and PruneTIRSettings().intent_jaccard == 0.5
    for bad in (
        {"turn_limit": 0},
        {"resample_temperature": 0},
        {"intent_jaccard": 1.5},
        {"stp": "maybe"},
        {"suspend_turns": 0},
    ):
        with pytest.raises(SettingsError):
            parse_settings(PruneTIRSettings, bad, guard="prunetir")
    assert PruneTIR.name == "prunetir" and PruneTIR.order == 10 and PruneTIR.__doc__.strip()


def test_loop_applies_only_sampling_fields():
    assert resample_sampling({"sampling": {"temperature": 0.7, "seed": 5}, "episode": 1}) == {
        "temperature": 0.7,
        "seed": 5,
    }
    assert resample_sampling({"temperature": 0.5, "episode": 1, "max_tokens": 9}) == {"temperature": 0.5}
    assert resample_sampling({}) == {}


# -- the recorded trajectories of the benchmark -------------------------------------------------


def _bench():
    """The benchmark's replay helpers (bench/ is not a package)."""
    if "bench_prunetir" not in sys.modules:
        path = Path(__file__).resolve().parents[3] / "bench" / "bench_prunetir.py"
        spec = importlib.util.spec_from_file_location("bench_prunetir", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules["bench_prunetir"]


DATA = sorted((Path(__file__).resolve().parents[3] / "tests" / "data" / "erroneous").glob("*.jsonl"))


def test_there_are_recorded_trajectories():
    assert 8 <= len(DATA) <= 12
    for path in DATA:
        head = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
        assert {"problem", "gold", "about", "expect"} <= set(head)


@pytest.mark.parametrize("path", DATA, ids=[p.stem for p in DATA])
async def test_recorded_trajectory_replays_as_expected(path):
    bench = _bench()
    rec = bench.load_recorded(path)
    off, _ = await bench.replay(rec, guarded=False)
    on, _ = await bench.replay(rec, guarded=True)
    m_off, m_on = run_metrics(off), run_metrics(on)
    assert (m_off["stp"], m_off["stpr"], m_off["rtts"]) == (0, 0, 0)
    assert {k: m_on[k] for k in ("stp", "stpr", "rtts")} == {k: rec.expect[k] for k in ("stp", "stpr", "rtts")}
    assert off[-1].reason == on[-1].reason == "answer" and off[-1].correct and on[-1].correct
    assert m_on["wtn_chars"] < m_off["wtn_chars"]  # every file has an episode to prune
    if "intent_shift" in rec.expect:
        prunes = [v for v in verdicts(on) if v.action == "prune"]
        assert [v.data["intent_shift"] for v in prunes] == [rec.expect["intent_shift"]]


async def test_order_with_the_real_attc(canned_kernel):
    try:
        chain_mod.guard_class("attc")
    except Exception as e:  # pragma: no cover - ATTC not installed in this checkout
        pytest.skip(f"attc not available: {e}")
    turns = [turn(f"Try {i}.", STUCK[i]) for i in range(4)] + [turn("Resampled.", "print(42)"), "\\boxed{42}"]
    kernel = canned_kernel(stuck_results(STUCK[:4]) + [ok("42")])
    events = await run(RecordingBackend(turns), kernel, both())
    by_call: dict[int, list[str]] = {}
    call = 0
    for e in events:
        if isinstance(e, ev.ToolResult):
            call = e.call
        elif isinstance(e, ev.GuardVerdict) and e.hook == "on_tool_result":
            by_call.setdefault(call, []).append(e.guard)
    assert by_call[1] == ["prunetir", "attc"]  # PruneTIR decides about the erroneous call first
    assert by_call[4] == ["prunetir"]  # STPR: the round ends, ATTC says nothing about a call that is gone
    assert by_call[5] == ["attc"]


# -- the budget PruneTIR needs --------------------------------------------------------------------


def test_the_budget_it_needs_follows_from_its_settings():
    assert PruneTIR.run_budget(PruneTIRSettings()) == {"max_tool_calls": 9}  # 2 stuck episodes of 4 calls + 1
    assert PruneTIR.run_budget(PruneTIRSettings(turn_limit=2, retry_limit=3)) == {"max_tool_calls": 10}
    assert PruneTIR.run_budget(PruneTIRSettings(turn_limit=1, retry_limit=1)) == {"max_tool_calls": 3}


async def test_on_the_default_budget_it_reaches_rtts(canned_kernel):
    """Turned on without a budget given, PruneTIR raises the default 4 tool calls to the 9 it needs, so
    both stuck episodes (STPR, then STPR + RTTS) happen; the run records the raised budget as ours."""
    turns = [turn(f"Try {i}.", STUCK[i]) for i in range(8)] + ["By hand the value is 42.\n\\boxed{42}"]
    events = await run(RecordingBackend(turns), canned_kernel(stuck_results(STUCK[:8])), chain(), RunSettings())
    assert [v.action for v in verdicts(events)][-1] == "suspend"
    started = events[0]
    assert started.settings["max_tool_calls"] == 9 and started.settings["raised"] == [["max_tool_calls", "prunetir"]]
    assert (events[-1].answer, events[-1].tool_calls) == ("42", 8)


async def test_a_budget_the_user_set_is_not_raised(canned_kernel):
    turns = [turn(f"Try {i}.", STUCK[i]) for i in range(8)] + ["\\boxed{42}"]
    settings = RunSettings(max_tool_calls=4, explicit=("max_tool_calls",))
    events = await run(RecordingBackend(turns), canned_kernel(stuck_results(STUCK[:4])), chain(), settings)
    assert events[0].settings["max_tool_calls"] == 4 and events[0].settings["raised"] == []
    assert "suspend" not in [v.action for v in verdicts(events)] and events[-1].tool_calls == 4
    # a guard's settings change what it needs: a turn limit of 1 needs 2 * 2 + 1 = 5 calls
    events = await run(RecordingBackend(["\\boxed{1}"]), canned_kernel([]), chain(turn_limit=1), RunSettings())
    assert events[0].settings["max_tool_calls"] == 5
    # a larger default than the guard needs stays as it is
    events = await run(RecordingBackend(["\\boxed{1}"]), canned_kernel([]), chain(), RunSettings(max_tool_calls=30))
    assert events[0].settings["max_tool_calls"] == 30 and events[0].settings["raised"] == []


# -- the paper's fine print (issue 42) ------------------------------------------------------------


def with_necessity(**prunetir) -> GuardChain:
    """PruneTIR, and necessity in enforce mode: a trivial block is not run, so a turn passes with no call."""
    return GuardChain({"prunetir": prunetir, "necessity": {"mode": "enforce"}}, {"prunetir", "necessity"})


async def test_a_success_after_the_turn_limit_is_stuck_not_resolved(canned_kernel):
    # [paper] "If an erroneous tool call fails to reach a successful resolution within a predefined
    # Turn Limit, the model is considered 'stuck'": e0 at turn 2, turns 3-5 write only a block that
    # necessity does not run, the first success comes at turn 6, three turns past e0 plus the limit.
    turns = [turn("Attempt 0.", STUCK[0])] + [turn(f"Check {i}.", "print(2 + 3)") for i in range(3)]
    turns += [turn("Now it works.", "print(base * 6)"), turn("Resampled.", "print(base * 6)"), "\\boxed{42}"]
    events = await run(
        RecordingBackend(turns), canned_kernel([*stuck_results(STUCK[:1]), ok("42"), ok("42")]), with_necessity()
    )
    vs = verdicts(events)
    assert [v.action for v in vs] == ["flag", "resample"]
    late = vs[-1]
    assert late.data["attempts"] == 4 and late.data["late_success_call"] == 5
    assert "succeeded only after the turn limit of 3" in late.reason


async def test_stp_counts_only_the_erroneous_calls_it_pruned(canned_kernel):
    # e0 fails, the next turn's block is not run (necessity), the third succeeds: STP prunes both,
    # but only e0 was an erroneous call
    turns = [turn("Attempt 0.", STUCK[0]), turn("Check.", "print(2 + 3)"), turn("Fixed.", "print(base * 6)")]
    events = await run(
        RecordingBackend([*turns, "\\boxed{42}"]),
        canned_kernel([*stuck_results(STUCK[:1]), ok("42")]),
        with_necessity(),
    )
    stp = verdicts(events)[-1]
    assert stp.action == "prune" and stp.data["pruned_calls"] == [1, 2]
    assert "1 erroneous call(s) pruned with 1 block(s) that never ran" in stp.reason


async def test_stpr_can_keep_e0s_reasoning_and_resample_only_the_call(canned_kernel):
    # [paper] STPR "resamples a new tool call conditioned on the interaction history preceding the
    # initial erroneous call": with stpr_keeps_reasoning the prose of e0's turn stays, its call goes
    turns = [PRE] + [turn(f"Attempt {i}.", STUCK[i]) for i in range(4)]
    turns += [turn("Resampled.", "print(base * 6)"), "\\boxed{42}"]
    backend = RecordingBackend(turns)
    kernel = canned_kernel([ok("7")] + stuck_results(STUCK[:4]) + [ok("42")])
    events = await run(backend, kernel, chain(stpr_keeps_reasoning=True))
    assert backend.prompts[5].startswith(backend.prompts[1]) and backend.prompts[5].rstrip().endswith("Attempt 0.")
    (cut,) = [e for e in events if isinstance(e, ev.ContextPruned)]
    assert "Attempt 0." not in cut.removed_text and "magic_0" in cut.removed_text
    assert verdicts(events)[-1].data["truncate_to"] == 5  # e0's code block, after its prose
