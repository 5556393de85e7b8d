"""A saved run as the exports draw it: its summary, its steps (prose, code, output, guard notes,
what was pruned) and, per step, where each token sits in its prose and code (token confidence)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tuiagent.core import events as ev
from tuiagent.core.compare import RunSummary, StepCell, step_cells, summary
from tuiagent.core.trajectory import load
from tuiagent.export.confidence import TokenSpans, turn_tokens
from tuiagent.mathtext import render_latex, render_math


@dataclass(frozen=True)
class Step:
    cell: StepCell
    prose_tokens: TokenSpans = field(default_factory=TokenSpans)
    code_tokens: TokenSpans = field(default_factory=TokenSpans)


@dataclass(frozen=True)
class Run:
    path: Path
    summary: RunSummary
    steps: list[Step]
    gold: str | None
    warnings: list[str]
    complete: bool  # the file ends with RunFinished


def _located(text: str, part: str, tokens: TokenSpans | None) -> TokenSpans:
    """The tokens over ``part`` where it first appears in ``text`` (none if it does not)."""
    at = text.find(part) if part else -1
    if tokens is None or at < 0:
        return TokenSpans()
    return tokens.window(at, at + len(part))


def load_run(path: Path) -> Run:
    """Read a trajectory (raises TrajectoryError, a UserError, for a file that is not one)."""
    loaded = load(path)
    events = loaded.events
    tokens = turn_tokens(events)
    texts = {e.turn: e.text for e in events if isinstance(e, ev.TurnEnded)}
    streamed: dict[int, str] = {}  # a turn cut short has no TurnEnded: its text as it streamed
    for e in events:
        if isinstance(e, ev.TokenDelta):
            streamed[e.turn] = streamed.get(e.turn, "") + e.text
    texts = {**streamed, **texts}
    steps = []
    for cell in step_cells(events):
        text, spans = texts.get(cell.turn, ""), tokens.get(cell.turn)
        steps.append(Step(cell, _located(text, cell.prose, spans), _located(text, cell.code or "", spans)))
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    return Run(
        Path(path),
        summary(events),
        steps,
        started.gold if started else None,
        list(loaded.warnings),
        bool(events) and isinstance(events[-1], ev.RunFinished),
    )


def answer_line(run: Run, *, math: bool = False) -> str:
    """``42 · right (gold 42)``, ``no answer``, ``7 · wrong (gold 42)`` (``math``: the answer's LaTeX rendered)."""
    s = run.summary
    answer = "no answer" if s.answer is None else render_latex(s.answer) if math else s.answer
    if s.correct is None:
        return answer + (f" · gold {run.gold}" if run.gold else "")
    return f"{answer} · {'right' if s.correct else 'wrong'} (gold {run.gold})"


def facts(run: Run, *, math: bool = False) -> list[tuple[str, str]]:
    """The summary rows every export shows, in order (``math``: the problem's and the answer's LaTeX rendered)."""
    s = run.summary
    return [
        ("problem", render_math(s.problem.strip()) if math else s.problem.strip()),
        ("model", s.model or "?"),
        ("guards", s.guards),
        ("answer", answer_line(run, math=math)),
        ("ended", s.reason if run.complete else f"{s.reason} (incomplete: the file has no end)"),
        ("tool calls", f"{s.tool_calls}" + (f" ({s.erroneous_calls} erroneous)" if s.erroneous_calls else "")),
        ("tokens", f"{s.generated_tokens} generated · {s.context_tokens} in the context at the end"),
        ("time", f"{s.wall_s:.1f} s"),
        ("trajectory", str(run.path)),
    ]


def status_words(cell: StepCell) -> str:
    """``call 2 · ✓ ok · 12 ms``."""
    label = {
        "ok": "✓ ok",
        "error": f"✗ {cell.error_name or 'error'}",
        "timeout": "⏱ timed out",
        "skipped": "⊘ not run",
        "running": "… running",
    }.get(cell.status, cell.status)
    ms = f" · {cell.duration_s * 1000:.0f} ms" if cell.duration_s is not None else ""
    return f"call {cell.call} · {label}{ms}"


def pruned_words(cell: StepCell) -> str:
    """``✂ pruned by STP (episode 1): its model text, code, tool output left the context``."""
    mark = cell.pruned
    if mark is None:
        return ""
    detail = f" ({mark.detail})" if mark.detail else ""
    parts = ", ".join({"model": "model text", "tool": "tool output"}.get(p, p) for p in sorted(mark.parts))
    return f"✂ pruned by {mark.label}{detail}: its {parts} left what the model saw (kept here)"
