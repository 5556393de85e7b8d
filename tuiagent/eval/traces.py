"""Error episodes in a run's turns: the trace the stuck curve reads, its episodes, and the curve
(PruneTIR's second finding, measured here on any eval: its protocol and the injected faults' both read
it; the definitions are in docs/papers/prunetir.md, "PruneTIR's analyses").

A run's trace has one character a turn: ``o`` (its executed call ran), ``e`` (it raised or timed out)
or ``.`` (no executed call), and ``|`` where the context was cut back before a resampled turn. An
episode opens at an ``e`` while none is open and closes at the next ``o`` (resolved), at a ``|`` (cut:
the error left the context) or at the run's end; every turn in between is a failed attempt.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import scipy.stats

from tuiagent.core import events as ev
from tuiagent.eval.results import run_events
from tuiagent.eval.stats import rounded, wilson

OK, ERR, NO_CALL, CUT = "o", "e", ".", "|"
STUCK_K = 8  # [ours] turns after an error the curve goes out to (PruneTIR's turn_limit is 3 [default])


def turn_trace(events: Iterable[ev.Event]) -> str:
    """A run's turns as characters (module docstring): what the stuck curve reads."""
    out: list[str] = []
    for e in events:
        if isinstance(e, ev.TurnStarted):
            out.append(NO_CALL)
        elif isinstance(e, ev.ToolResult) and e.executed and out:
            out[-1] = ERR if e.error or e.timed_out else OK
        elif isinstance(e, ev.ContextPruned) and e.truncate_to is not None:
            out.append(CUT)
    return "".join(out)


def record_trace(record: dict[str, Any]) -> str | None:
    """The run's trace: its record's (runs recorded since the field exists), else folded from its
    trajectory; None when neither is there."""
    if isinstance(record.get("turn_trace"), str):
        return str(record["turn_trace"])
    events = run_events(record)
    return None if events is None else turn_trace(events)


def episodes(trace: str) -> list[tuple[str, str]]:
    """(attempts, end) of every error episode of a trace: the turns after its error, one character
    each, and how it ended: "resolved", "cut" or "ended" (the run ended first)."""
    out: list[tuple[str, str]] = []
    attempts: str | None = None
    for c in trace:
        if c == CUT:
            if attempts is not None:
                out.append((attempts, "cut"))
            attempts = None
        elif attempts is None:
            attempts = "" if c == ERR else None
        else:
            attempts += c
            if c == OK:
                out.append((attempts, "resolved"))
                attempts = None
    if attempts is not None:
        out.append((attempts, "ended"))
    return out


def stuck_curve(traces: Iterable[str], k_max: int = STUCK_K) -> dict[str, Any]:
    """Per k = 1..k_max: episodes still open after k-1 turns whose run had a k-th turn (at risk),
    those resolved at it, the rate and its Wilson interval, and the share resolved by turn k
    (Kaplan-Meier, ``scipy.stats.ecdf`` of the turns to resolution: an episode that ends unresolved
    is right-censored at its last turn, so it leaves the risk set after it); and how the episodes ended."""
    eps = [e for t in traces for e in episodes(t)]
    km = scipy.stats.ecdf(
        scipy.stats.CensoredData(
            uncensored=[len(a) for a, end in eps if end == "resolved"],
            right=[len(a) for a, end in eps if end != "resolved"],
        )
    ).cdf
    curve = []
    for k in range(1, k_max + 1):
        at_risk = [a for a, _ in eps if len(a) >= k]
        resolved = sum(a[k - 1] == OK for a in at_risk)
        lo, hi = wilson(resolved, len(at_risk))
        curve.append(
            {
                "k": k,
                "at_risk": len(at_risk),
                "resolved": resolved,
                "p": rounded(resolved / len(at_risk)) if at_risk else None,
                "ci": [rounded(lo), rounded(hi)],
                "resolved_by_k": rounded(float(km.evaluate(k))) if at_risk else None,
            }
        )
    ends = {end: sum(e == end for _, e in eps) for end in ("resolved", "cut", "ended")}
    return {"episodes": len(eps), **ends, "later": sum(len(a) > k_max for a, _ in eps), "curve": curve}
