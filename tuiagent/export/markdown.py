"""A run, or a comparison, as Markdown: the summary as a table, then each step (prose, its math
rendered unless ``math=False``; the code fenced, its output, each guard's note, a pruned step marked
and kept)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from tuiagent.core.compare import align, first_divergence
from tuiagent.export.document import Run, answer_line, facts, pruned_words, status_words
from tuiagent.mathtext import render_latex, render_math


def _fence(text: str, lang: str) -> str:
    """A fenced block that survives backticks inside ``text`` (the fence is longer than any run of them)."""
    longest = max((len(m.group()) for m in re.finditer("`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _steps(run: Run, level: str, math: bool) -> list[str]:
    out = []
    for step in run.steps:
        c = step.cell
        out.append(f"{level} Step {c.turn}" + (" · ✂ pruned" if c.pruned else ""))
        if c.pruned:
            out.append(f"> {pruned_words(c)}")
        if c.edited:
            out.append(f"> ✎ {c.edited}")
        if c.prose:
            out.append(render_math(c.prose) if math else c.prose)
        if c.code is not None:
            out.append(_fence(c.code, "python"))
            out.append(f"*{status_words(c)}*")
            if c.output.strip():
                out.append(_fence(c.output, "output"))
        for v in c.verdicts:
            out.append(f"> **{v.guard}** · {v.action}: {v.text}")
        if c.answer is not None:
            answer = render_latex(c.answer) if math else c.answer
            out.append(f"**answer attempt:** {answer}" + (" (final)" if c.answer_final else ""))
    return out


def run_md(run: Run, *, math: bool = True) -> str:
    lines = [f"# tuiagent run · {answer_line(run, math=math)}", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {_cell(v)} |" for k, v in facts(run, math=math)]
    body = _steps(run, "##", math)
    if run.warnings:
        body.append("> lines skipped in the file: " + "; ".join(run.warnings))
    return "\n\n".join(["\n".join(lines), *body]) + "\n"


def comparison_md(runs: Sequence[Run], *, math: bool = True) -> str:
    names = [f"{i + 1}. {r.path.stem}" for i, r in enumerate(runs)]
    head = ["# tuiagent comparison", "", "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(runs)]
    keys = [k for k, _ in facts(runs[0])]
    table = [dict(facts(r, math=math)) for r in runs]
    head += [f"| {k} | " + " | ".join(_cell(t[k]) for t in table) + " |" for k in keys]
    rows = align([[s.cell for s in r.steps] for r in runs])
    diverge = first_divergence(rows)
    if diverge is not None:
        head += ["", f"The runs first differ at step {next(c.turn for c in rows[diverge] if c is not None)}."]
    body = []
    for name, run in zip(names, runs, strict=True):
        body.append(f"## {name}")
        body += _steps(run, "###", math)
    return "\n\n".join(["\n".join(head), *body]) + "\n"
