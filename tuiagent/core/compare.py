"""Comparing runs, and the views of one run that the app and comparisons share.

All of it is folded from events (nothing stored twice):

- :func:`pruned_parts`: which parts (prose, code, output, notes) of which turns a guard removed
  from the working context, and why (STP, STPR, RTTS), found by folding the working context
  just before and just after each ``ContextPruned`` event;
- :func:`step_cells`: one compact record per step (turn) for side-by-side columns;
- :func:`align`: the steps of several runs as rows, aligned by turn number;
- :func:`summary`: answer, right or wrong, tool calls, context tokens, time;
- :func:`run_columns`: run the columns of a live comparison one after another or concurrently
  (a column's setting is a string of the one grammar, tuiagent.core.run_spec).

No UI code here: the Textual app renders these records.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from guards.chain import presenter
from tuiagent.core import events as ev
from tuiagent.core.context import working_context
from tuiagent.core.fork import is_fork_mark
from tuiagent.core.steps import steps
from tuiagent.parsing import last_closed_block
from tuiagent.protocol import Segment

# -- pruning -----------------------------------------------------------------------------------


@dataclass
class PruneMark:
    """What was removed from one turn's share of the working context, and why."""

    turn: int
    label: str  # "STP", "STPR", "STPR+RTTS", or the pruning guard's name
    detail: str = ""  # "episode 1 · 2 attempts · intent shift"
    parts: set[str] = field(default_factory=set)  # segment kinds removed: model, code, tool, note
    event_index: int = 0  # index of the ContextPruned event

    @property
    def whole(self) -> bool:
        """The turn's code (and so its output) was removed, not only its prose."""
        return "code" in self.parts or "tool" in self.parts


def _label(verdict: ev.GuardVerdict | None, pruned: ev.ContextPruned) -> tuple[str, str]:
    """(label, details) for a prune, as the guard that pruned names it (its name by default)."""
    if verdict is None:
        return pruned.guard, ""
    return presenter(verdict.guard).prune_label(verdict.record(), kept=pruned.keep is not None)


def pruned_parts(events: Sequence[ev.Event]) -> dict[int, PruneMark]:
    """Turn -> what a guard pruned from it (the trajectory keeps it; the working context lost it)."""
    events = list(events)
    marks: dict[int, PruneMark] = {}
    last_verdict: dict[str, ev.GuardVerdict] = {}
    for i, e in enumerate(events):
        if isinstance(e, ev.GuardVerdict):
            last_verdict[e.guard] = e
        if not isinstance(e, ev.ContextPruned):
            continue
        before = working_context(events[:i])
        after = working_context(events[: i + 1])
        if before is None or after is None:
            continue
        kept = {_key(s) for s in after.segments}
        label, detail = _label(last_verdict.get(e.guard), e)
        for s in before.segments:
            if s.kind == "prompt" or s.turn <= 0 or _key(s) in kept:
                continue
            mark = marks.get(s.turn)
            if mark is None:
                mark = marks[s.turn] = PruneMark(s.turn, label, detail, set(), i)
            mark.parts.add(s.kind)
    return marks


def _key(segment: Segment) -> tuple[str, int, int | None, str, str]:
    return (segment.kind, segment.turn, segment.call, segment.source, segment.text)


# -- steps as cells ----------------------------------------------------------------------------


@dataclass(frozen=True)
class VerdictNote:
    guard: str
    action: str
    text: str  # short, for a cell: "conf 0.962 < 0.97 rethink"


@dataclass(frozen=True)
class StepCell:
    """One step of a run, compact: for a column of a comparison."""

    turn: int
    prose: str
    code: str | None = None
    call: int | None = None
    status: str = ""  # "", "ok", "error", "timeout", "skipped", "running"
    error_name: str | None = None
    duration_s: float | None = None
    output: str = ""
    verdicts: tuple[VerdictNote, ...] = ()
    pruned: PruneMark | None = None
    answer: str | None = None
    answer_final: bool = False
    stop: str = ""
    tokens: int = 0
    forked: bool = False  # a fork's first own step (the steps before it are its parent's)
    edited: str = ""  # what an Intervention replaced in this step, in words ("output of call 2 edited")
    settled: bool = True  # its turn has ended and its call (if any) has a result: nothing here changes now


def verdict_note(v: ev.GuardVerdict) -> VerdictNote:
    """One line about a verdict, as its guard words it."""
    return VerdictNote(v.guard, v.action, presenter(v.guard).note(v.record()))


def shown(v: ev.GuardVerdict) -> bool:
    """Whether a verdict has something to show (its guard gives it a display)."""
    return presenter(v.guard).display(v.record()) is not None


def step_cells(events: Sequence[ev.Event]) -> list[StepCell]:
    """The steps of a run (finished or not) as compact cells; a turn still generating shows its text so far."""
    events = list(events)
    marks = pruned_parts(events) if any(isinstance(e, ev.ContextPruned) for e in events) else {}
    cells = []
    live_text: dict[int, str] = {}
    for e in events:
        if isinstance(e, ev.TokenDelta):
            live_text[e.turn] = live_text.get(e.turn, "") + e.text
    started = events[0] if events and isinstance(events[0], ev.RunStarted) else None
    first_own = None
    if started is not None and started.parent:  # an edit fork's own part starts inside the step it edits
        first_own = started.parent.get("step", -1) + (0 if started.parent.get("edit") else 1)
    for s in steps(events):
        text = s.text or live_text.get(s.turn, "")
        prose = text
        if s.code is not None:
            block = last_closed_block(text)
            if block is not None:
                prose = text[: block.start]
        status, err, dur, out = "", None, None, ""
        if s.code is not None:
            if s.result is None:
                status = "running"
            else:
                r = s.result
                status = "skipped" if not r.executed else "timeout" if r.timed_out else "error" if r.error else "ok"
                err, dur, out = r.error_name, (r.duration_s if r.executed else None), r.shown
        cells.append(
            StepCell(
                turn=s.turn,
                prose=prose.strip(),
                code=s.code.code if s.code else None,
                call=s.code.call if s.code else None,
                status=status,
                error_name=err,
                duration_s=dur,
                output=out,
                verdicts=tuple(verdict_note(v) for v in s.verdicts if shown(v)),
                pruned=marks.get(s.turn),
                answer=s.answer.answer if s.answer else None,
                answer_final=bool(s.answer and s.answer.final),
                stop=s.stop,
                tokens=s.tokens,
                forked=s.turn == first_own,
                edited="; ".join(intervention_label(i) for i in s.interventions),
                settled=bool(s.stop) and (s.code is None or s.result is not None),
            )
        )
    return cells


def intervention_label(e: ev.Intervention) -> str:
    """An Intervention in a few words: "output of call 2 edited", "text from token 5 edited", "output of
    call 2 faulted (empty)"."""
    what = f"text from token {e.token}" if e.target == "text" else f"{e.target} of call {e.call}"
    return f"{what} faulted ({e.fault})" if e.fault else f"{what} edited"


def first_divergence(rows: Sequence[Sequence[StepCell | None]], open_columns: Sequence[bool] = ()) -> int | None:
    """The index of the first aligned row where the runs did something different (text, code,
    output or answer; a run that has no such step differs), or None while they agree.

    While runs stream (``open_columns``: which columns have not finished), a step still being
    written differs only where its text so far contradicts the other's, and a gap in a column that
    is still running is no difference yet: two runs at different points of the same text agree."""

    def what(cell: StepCell) -> tuple[str, str | None, str, str | None]:
        return (cell.prose, cell.code, cell.output, cell.answer)

    def differ(a: StepCell | None, b: StepCell | None, a_open: bool, b_open: bool) -> bool:
        if a is None or b is None:  # a gap: a difference unless that run may still get there
            return (a is None and not a_open and b is not None) or (b is None and not b_open and a is not None)
        if (a.settled or not a_open) and (b.settled or not b_open):
            return what(a) != what(b)
        return not (a.prose.startswith(b.prose) or b.prose.startswith(a.prose))

    for i, row in enumerate(rows):
        live = [c < len(open_columns) and open_columns[c] for c in range(len(row))]
        pairs = ((j, k) for j in range(len(row)) for k in range(j + 1, len(row)))
        if any(differ(row[j], row[k], live[j], live[k]) for j, k in pairs):
            return i
    return None


def cell_line(cell: StepCell | None) -> str:
    """A step in one line, for a plain-text comparison: its call and how it went, the verdicts, the
    answer, and any edit or prune ("call 1 ok -> 45040 · attc trust · answer 45040")."""
    if cell is None:
        return "(no such step)"
    parts = []
    if cell.edited:
        parts.append(f"✎ {cell.edited}")
    if cell.pruned is not None:
        parts.append(f"✂ {cell.pruned.label}")
    if cell.code is not None:
        out = cell.output.strip().splitlines()
        result = f" -> {out[-1][:40]}" if cell.status == "ok" and out else ""
        err = f" {cell.error_name}" if cell.status == "error" and cell.error_name else ""
        parts.append(f"call {cell.call} {cell.status or '?'}{err}{result}")
    parts += [f"{v.guard} {v.action}" for v in cell.verdicts]
    if cell.answer is not None:
        parts.append(f"answer {cell.answer}" + ("" if cell.answer_final else " (attempt)"))
    if not parts:
        parts.append(cell.stop or "text")
    return " · ".join(parts)


def align(runs: Sequence[Sequence[StepCell]]) -> list[tuple[StepCell | None, ...]]:
    """Rows of steps, one column per run, aligned by turn number (a run with fewer turns has gaps)."""
    by_turn = [{c.turn: c for c in cells} for cells in runs]
    turns = sorted({t for m in by_turn for t in m})
    return [tuple(m.get(t) for m in by_turn) for t in turns]


# -- summaries ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSummary:
    answer: str | None
    correct: bool | None
    tool_calls: int
    erroneous_calls: int
    context_tokens: int
    generated_tokens: int
    wall_s: float
    reason: str  # RunFinished.reason, or "running" / "not started"
    guards: str  # e.g. "attc+prunetir" (the guards on at the start) or "none"
    problem: str = ""
    model: str = ""
    trajectory: str | None = None


def guards_label(events: Iterable[ev.Event]) -> str:
    """The guards on at the start of a run (of a fork: at its fork point), joined with '+', or 'none'."""
    on: set[str] = set()
    before_fork = False  # in a fork's copy of its parent's steps
    for e in events:
        if isinstance(e, ev.RunStarted):
            before_fork = bool(e.parent)
        elif is_fork_mark(e):
            on, before_fork = set(), False
        elif isinstance(e, ev.GuardToggled) and e.reason in ("on at start", ""):
            (on.add if e.enabled else on.discard)(e.guard)
        elif isinstance(e, ev.TurnStarted) and not before_fork:
            break
    return "+".join(sorted(on)) or "none"


def summary(events: Sequence[ev.Event]) -> RunSummary:
    events = list(events)
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    finished = next((e for e in reversed(events) if isinstance(e, ev.RunFinished)), None)
    label = guards_label(events)
    if finished is not None:
        return RunSummary(
            finished.answer,
            finished.correct,
            finished.tool_calls,
            finished.erroneous_calls,
            finished.context_tokens,
            finished.generated_tokens,
            finished.wall_s,
            finished.reason,
            label,
            started.problem if started else "",
            started.model_id if started else "",
            finished.trajectory,
        )
    results = [e for e in events if isinstance(e, ev.ToolResult) and e.executed]
    context = next((e.context_tokens for e in reversed(events) if isinstance(e, ev.TurnStarted)), 0)
    tokens = sum(isinstance(e, ev.TokenDelta) for e in events)
    wall = (events[-1].t - started.t) if started and events else 0.0
    return RunSummary(
        None,
        None,
        len(results),
        sum(r.error or r.timed_out for r in results),
        context,
        tokens,
        round(wall, 3),
        "running" if started else "not started",
        label,
        started.problem if started else "",
        started.model_id if started else "",
    )


# -- live comparison ---------------------------------------------------------------------------


async def run_columns(starts: Sequence[Callable[[], Awaitable[Any]]], *, concurrent: bool = False) -> list[Any]:
    """Run the columns of a comparison: one after another (the default: with one local model the
    prefix cache stays warm for each run), or all at once (a shared model serialises generations,
    and every switch re-evaluates the part of the prompt that differs). A column that fails
    returns its exception; the others go on."""
    if concurrent:
        return list(await asyncio.gather(*(s() for s in starts), return_exceptions=True))
    out: list[Any] = []
    for start in starts:
        try:
            out.append(await start())
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a failed column is shown, the next still runs
            out.append(e)
    return out
