"""Export a saved run, or a comparison of runs, to Markdown or to one self-contained HTML page
(headless: used by ``tuiagent export`` and by the app's export key)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tuiagent.errors import UserError

FORMATS = ("md", "html")


def export_runs(paths: Sequence[Path], fmt: str, *, shade: bool = False, math: bool = True) -> str:
    """The text of the export: one run, or a comparison of two or more (``shade``: token confidence
    as background shades, HTML only; ``math``: the model's LaTeX rendered, ``tuiagent.mathtext``)."""
    from tuiagent.export.document import load_run

    if fmt not in FORMATS:
        raise UserError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
    if not paths:
        raise UserError("give a trajectory file to export")
    runs = [load_run(Path(p)) for p in paths]
    if fmt == "md":
        from tuiagent.export.markdown import comparison_md, run_md

        return run_md(runs[0], math=math) if len(runs) == 1 else comparison_md(runs, math=math)
    from tuiagent.export.html import comparison_html, run_html

    return (
        run_html(runs[0], shade=shade, math=math) if len(runs) == 1 else comparison_html(runs, shade=shade, math=math)
    )


def default_output(paths: Sequence[Path], fmt: str) -> Path:
    """Where the app writes an export: beside the (first) trajectory, its suffix changed."""
    first = Path(paths[0])
    stem = first.stem if len(paths) == 1 else f"{first.stem}-compare{len(paths)}"
    return first.with_name(f"{stem}.{fmt}")
