"""Runs side by side: one column per run, one row per step (aligned by turn), cells kept compact."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Grid, VerticalScroll
from textual.content import Content
from textual.widgets import Static

from tuiagent.core.compare import StepCell, align, first_divergence
from tuiagent.mathtext import render_latex, render_math

_STATUS = {
    "ok": ("✓", "$text-success"),
    "error": ("✗", "$text-error"),
    "timeout": ("⏱", "$text-error"),
    "skipped": ("⊘", "$text-warning"),
    "running": ("…", "$text-accent"),
}


def cell_content(cell: StepCell | None, *, prose_lines: int = 3, diverges: bool = False, math: bool = True) -> Content:
    if cell is None:
        return Content.styled("·" + ("  ≠ no such step here" if diverges else ""), "$text-muted")
    lines: list[Content] = []
    head = [(f"turn {cell.turn}", "bold")]
    if cell.forked:
        head.append(("  ⑂ fork starts here", "bold $text-warning"))
    if cell.edited:
        head.append((f"  ✎ {cell.edited}", "bold $text-warning"))
    if diverges:
        head.append(("  ≠ first divergence", "bold $text-accent"))
    if cell.pruned is not None:
        head.append((f"  ✂ {cell.pruned.label}", "bold $text-warning"))
    lines.append(Content.assemble(*head))
    if cell.prose:
        prose = (render_math(cell.prose) if math else cell.prose).splitlines()
        text = "\n".join(prose[-prose_lines:])
        lines.append(
            Content.styled(
                ("…" if len(prose) > prose_lines else "") + text, "$text-muted" if cell.pruned is not None else ""
            )
        )
    if cell.code is not None:
        mark, style = _STATUS.get(cell.status, ("?", ""))
        dur = f" {cell.duration_s * 1000:.0f} ms" if cell.duration_s is not None else ""
        err = f" {cell.error_name}" if cell.error_name and cell.status == "error" else ""
        lines.append(Content.assemble((f"{mark} call {cell.call}{err}{dur}", f"bold {style}")))
        code = "\n".join(f"  {ln}" for ln in cell.code.strip("\n").splitlines())
        lines.append(Content.styled(code, "$text-secondary"))  # whole, wrapped by the cell
        if cell.output and cell.status == "ok":
            out = cell.output.strip().splitlines()
            lines.append(Content.styled(f"  → {out[-1][:50] if out else ''}", "$text-success"))
    for v in cell.verdicts:
        lines.append(Content.assemble((f"{v.guard} ", "bold $text-accent"), (v.text, "$text-muted")))
    if cell.answer is not None:
        lines.append(
            Content.assemble(
                ("answer ", "$text-muted"),
                (render_latex(cell.answer) if math else cell.answer, "bold"),
                ("" if cell.answer_final else " (attempt)", "$text-muted"),
            )
        )
    return Content("\n").join(lines)


class CompareGrid(VerticalScroll, can_focus=True):
    DEFAULT_CSS = """
    CompareGrid { height: 1fr; }
    CompareGrid > Grid { height: auto; grid-size: 2; grid-rows: auto; grid-gutter: 0 1; }
    CompareGrid Static { height: auto; padding: 0 1; border-bottom: dashed $secondary 50%; }
    CompareGrid Static.-pruned { background: $warning-muted 20%; }
    CompareGrid Static.-gap { color: $text-muted; }
    CompareGrid Static.-diverges { border-top: heavy $accent; }
    """

    def __init__(self, *, id: str | None = None):
        super().__init__(id=id)
        self.columns = 2
        self.rows: list[tuple[StepCell | None, ...]] = []
        self.divergence: int | None = None  # the first row where the columns differ
        self._drawn: dict[int, tuple[StepCell | None, bool, bool]] = {}  # what the cell widget at each index shows

    def compose(self) -> ComposeResult:
        yield Grid(id="compare-cells")

    def show(self, runs: Sequence[Sequence[StepCell]], *, math: bool = True, open_columns: Sequence[bool] = ()) -> None:
        """Redraw for these runs' steps (cells are reused, so a live update only repaints what
        changed); ``math``: the model's math rendered; ``open_columns``: the runs still going."""
        grid = self.query_one(Grid)
        n = max(1, len(runs))
        if n != self.columns:
            self.columns = n
            grid.styles.grid_size_columns = n
        self.rows = align(runs)
        self.divergence = first_divergence(self.rows, open_columns) if len(runs) > 1 else None
        cells = [c for row in self.rows for c in row]
        existing = [w for w in grid.children if isinstance(w, Static)]  # all of them: only cells are mounted
        if len(existing) > len(cells):
            for w in existing[len(cells) :]:
                w.remove()
            existing = existing[: len(cells)]
        new = []
        for i, cell in enumerate(cells):
            diverges = i // n == self.divergence
            drawn = (cell, diverges, math)
            if i < len(existing):
                w = existing[i]
                if self._drawn.get(i) != drawn:
                    w.update(cell_content(cell, diverges=diverges, math=math))
            else:
                w = Static(cell_content(cell, diverges=diverges, math=math))
                new.append(w)
            self._drawn[i] = drawn
            w.set_class(diverges, "-diverges")
            w.set_class(cell is not None and cell.pruned is not None, "-pruned")
            w.set_class(cell is None, "-gap")
        if new:
            grid.mount_all(new)
