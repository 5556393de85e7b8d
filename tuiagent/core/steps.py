"""Views folded from a run's events: the steps of a run, and the working context at any point.

Nothing here is stored: replay, comparison and summaries are folds over the same events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tuiagent.core import events as ev
from tuiagent.core.context import working_context
from tuiagent.protocol import RunPiece


@dataclass
class Step:
    """One turn and what followed it: its code, the tool result, guard verdicts, notes, an answer."""

    turn: int
    text: str = ""
    tokens: int = 0
    stop: str = ""
    code: ev.CodeBlock | None = None
    result: ev.ToolResult | None = None
    verdicts: list[ev.GuardVerdict] = field(default_factory=list)
    notes: list[ev.ContextAppended] = field(default_factory=list)
    pruned: list[ev.ContextPruned] = field(default_factory=list)
    answer: ev.AnswerAttempt | None = None
    interventions: list[ev.Intervention] = field(default_factory=list)  # what was put in place of the run's own


def run_pieces(events: Sequence[ev.Event]) -> tuple[RunPiece, ...]:
    """The whole run in order, pruned parts included, as guards read a trajectory (the TIM monitor
    at the end of a run, every guard's metrics): generated turns, code blocks, executed outputs."""
    executed = {e.call for e in events if isinstance(e, ev.ToolResult) and e.executed}
    pieces = []
    for e in events:
        if isinstance(e, ev.TurnEnded):
            pieces.append(RunPiece("turn", e.text))
        elif isinstance(e, ev.CodeBlock):
            pieces.append(RunPiece("code", e.code, executed=e.call in executed))
        elif isinstance(e, ev.ToolResult) and e.executed:
            pieces.append(RunPiece("output", e.shown, error=e.error or e.timed_out))
    return tuple(pieces)


def steps(events: Iterable[ev.Event]) -> list[Step]:
    out: list[Step] = []
    early: list[ev.Intervention] = []  # an edit of a turn's text comes before the turn starts
    for e in events:
        if isinstance(e, ev.TurnStarted):
            out.append(Step(turn=e.turn, interventions=[i for i in early if i.turn == e.turn]))
            early = [i for i in early if i.turn != e.turn]
        elif isinstance(e, ev.Intervention):
            (out[-1].interventions if out and out[-1].turn == e.turn else early).append(e)
        elif not out:
            continue
        elif isinstance(e, ev.TurnEnded):
            out[-1].text, out[-1].tokens, out[-1].stop = e.text, e.tokens, e.stop
        elif isinstance(e, ev.CodeBlock):
            out[-1].code = e
        elif isinstance(e, ev.ToolResult):
            out[-1].result = e
        elif isinstance(e, ev.GuardVerdict):
            out[-1].verdicts.append(e)
        elif isinstance(e, ev.ContextAppended) and e.kind == "note":
            out[-1].notes.append(e)
        elif isinstance(e, ev.ContextPruned):
            out[-1].pruned.append(e)
        elif isinstance(e, ev.AnswerAttempt):
            out[-1].answer = e
    return out


def run_metrics(events: Iterable[ev.Event], count_tokens: Callable[[str], int] | None = None) -> dict[str, Any]:
    """Per-run tool metrics (PruneTIR's names, our definitions), for any run, guards on or off.

    - ``tcn``: tool calls executed in the whole trajectory, pruned and resampled ones included;
    - ``wtn``: tokens of the final working context (``count_tokens`` of its text; None without one),
      ``wtn_chars`` its length in characters;
    - ``erroneous``: executed calls that raised or timed out;
    - ``stp`` / ``stpr`` / ``rtts``: context prunes (``keep``), truncations before a resample
      (``truncate_to``), and tool suspensions (a ``suspend`` verdict) in the run.
    """
    events = list(events)
    results = [e for e in events if isinstance(e, ev.ToolResult) and e.executed]
    pruned = [e for e in events if isinstance(e, ev.ContextPruned)]
    context = working_context(events)
    text = context.text if context is not None else ""
    return {
        "tcn": len(results),
        "wtn": count_tokens(text) if count_tokens is not None else None,
        "wtn_chars": len(text),
        "erroneous": sum(e.error or e.timed_out for e in results),
        "stp": sum(e.keep is not None for e in pruned),
        "stpr": sum(e.truncate_to is not None for e in pruned),
        "rtts": sum(isinstance(e, ev.GuardVerdict) and e.action == "suspend" for e in events),
    }
