"""One run's numbers, folded from its events (the same events its trajectory holds).

The loop's own numbers (answer, tool calls, context tokens, prunes, time) come from the events;
each installed guard adds its own from the run (``GuardBase.metrics``): what its verdicts said
when it was on, and numbers it measures on every run, on or off, so settings compare (the
necessity guard's arithmetic heuristic's unnecessary calls, the TIM monitor's flag).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from guards.chain import available, presenter
from tuiagent.core import events as ev
from tuiagent.core.steps import run_metrics, run_pieces
from tuiagent.eval.faults_report import injection_of, tool_verdicts
from tuiagent.eval.traces import turn_trace
from tuiagent.protocol import RunRecord


def run_record(events: list[ev.Event], count_tokens: Callable[[str], int] | None = None) -> dict[str, Any]:
    """The per-run numbers of the eval (everything but the keys), from a finished run's events."""
    finished = next(e for e in reversed(events) if isinstance(e, ev.RunFinished))
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    gold = started.gold if started else None
    problem = started.problem if started else ""
    base = run_metrics(events, count_tokens)
    results = [e for e in events if isinstance(e, ev.ToolResult)]
    run = RunRecord(
        run_pieces(events),
        tuple(e.record() for e in events if isinstance(e, ev.GuardVerdict)),
        finished.answer,
        gold,
        finished.correct,
        problem,
    )
    return {
        "answer": finished.answer,
        "correct": finished.correct,
        "reason": finished.reason,
        "tcn": base["tcn"],
        "tool_calls": finished.tool_calls,
        "blocks": sum(isinstance(e, ev.CodeBlock) for e in events),
        "skipped_calls": sum(not r.executed for r in results),
        "erroneous": base["erroneous"],
        "wtn": finished.context_tokens if base["wtn"] is None else base["wtn"],
        "generated_tokens": finished.generated_tokens,
        "turns": sum(isinstance(e, ev.TurnEnded) for e in events),
        "turn_trace": turn_trace(events),  # the stuck curve's (eval.traces: PruneTIR's and the faults')
        "wall_s": finished.wall_s,
        "resampled": base["stpr"],
        "suspended": base["rtts"],
        "stp": base["stp"],
        **guard_metrics(run),
        "injection": injection_of(events),  # an injected fault (eval --inject; eval.faults_report)
        "tool_verdicts": tool_verdicts(events),
        "notices": [e.message for e in events if isinstance(e, ev.Notice) and e.level == "error"][:3],
        "trajectory": finished.trajectory,
    }


def guard_metrics(run: RunRecord) -> dict[str, Any]:
    """Every installed guard's numbers for the run (each guard names its own; the same keys
    whether it was on or off, so settings compare)."""
    out: dict[str, Any] = {}
    for name in available():
        out.update(presenter(name).metrics(run))
    return out
