"""A run, or a comparison, as one self-contained HTML page (inline CSS, no script, no link out):
code highlighted with pygments, the model's math rendered (``math``; its LaTeX in the tooltip), guard
notes beside the step they are about, pruned steps drawn struck through and kept, and (``shade``)
every token shaded by its probability, the exact value in its tooltip."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from pygments.lexers import PythonLexer
from pygments.styles import get_style_by_name

from tuiagent.core.compare import align, first_divergence
from tuiagent.export.confidence import BAND_LIMITS, TokenSpans, band, legend
from tuiagent.export.document import Run, Step, answer_line, facts, pruned_words, status_words
from tuiagent.mathtext import pieces, render_latex, rendered_spans

# Background of each confidence band, least sure first (BAND_LIMITS): red, orange, pale yellow (ours).
BAND_COLOURS = ("#f4a3a3", "#f7c98b", "#fbeab8")
CODE_STYLE = get_style_by_name("default")  # pygments' own default palette, readable on white

CSS = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #1d1d1f; background: #fff; }
table.facts td { padding: 2px 12px 2px 0; vertical-align: top; }
table.facts td:first-child { color: #666; white-space: nowrap; }
.step { border-left: 3px solid #4a6fa5; margin: 1.2em 0; padding: 0.2em 0 0.2em 1em; }
.step h2, .step h3 { font-size: 1em; margin: 0 0 0.4em; color: #4a6fa5; }
.step.pruned { border-left: 3px dashed #b58900; background: repeating-linear-gradient(135deg, #fff, #fff 8px, #fbf6e6 8px, #fbf6e6 16px); }
.gone { opacity: 0.75; text-decoration: line-through; text-decoration-color: #b58900aa; }
.prune { color: #8a6d00; font-weight: 600; }
.prose { white-space: pre-wrap; }
pre { background: #f6f8fa; padding: 0.6em 0.8em; overflow-x: auto; border-radius: 4px; margin: 0.4em 0; }
pre.output { background: #f0f0f0; color: #333; }
.status { color: #555; font-size: 0.9em; }
.status.error { color: #b00020; }
.verdict { background: #eef3fb; border-left: 3px solid #4a6fa5; padding: 0.2em 0.6em; margin: 0.3em 0; font-size: 0.92em; }
.verdict b { color: #23416e; }
.answer { font-weight: 600; }
.legend span { padding: 0 0.4em; margin-right: 0.3em; }
table.compare { border-collapse: collapse; width: 100%; table-layout: fixed; }
table.compare td, table.compare th { border: 1px solid #ddd; vertical-align: top; padding: 0.3em; }
table.compare tr.diverge > td { border-top: 3px solid #b00020; }
.right { color: #1b7f3b; } .wrong { color: #b00020; }
"""


def _token_styles(text: str, tokens: TokenSpans | None) -> list[tuple[int, int, str, str]]:
    """(start, end, css, title) for each shaded token of ``text``."""
    if tokens is None:
        return []
    out = []
    for start, end, p in zip(tokens.starts, tokens.ends, tokens.probs, strict=True):
        b = None if p is None else band(p)
        if b is not None and p is not None and end <= len(text):
            out.append((start, end, f"background:{BAND_COLOURS[b]}", f"p = {p:.4f}"))
    return out


def _spans(text: str, layers: Sequence[Sequence[tuple[int, int, str, str]]]) -> str:
    """``text`` as HTML with each layer's (start, end, css, title) spans merged: cut at every boundary."""
    cuts = {0, len(text)}
    for layer in layers:
        for start, end, _, _ in layer:
            cuts.update((start, end))
    bounds = sorted(c for c in cuts if 0 <= c <= len(text))
    # Per layer, the span covering each piece (spans within a layer do not overlap).
    out = []
    index = [0] * len(layers)
    for a, b in zip(bounds, bounds[1:]):
        css, title = [], ""
        for k, layer in enumerate(layers):
            while index[k] < len(layer) and layer[index[k]][1] <= a:
                index[k] += 1
            if index[k] < len(layer) and layer[index[k]][0] <= a:
                css.append(layer[index[k]][2])
                title = title or layer[index[k]][3]
        piece = escape(text[a:b])
        if css or title:
            attr = f' title="{escape(title)}"' if title else ""
            piece = f'<span style="{";".join(c for c in css if c)}"{attr}>{piece}</span>'
        out.append(piece)
    return "".join(out)


def _code_styles(code: str) -> list[tuple[int, int, str, str]]:
    out, pos = [], 0
    for ttype, value in PythonLexer(stripnl=False, ensurenl=False).get_tokens(code):
        style = CODE_STYLE.style_for_token(ttype)
        css = ";".join(
            filter(
                None,
                [
                    f"color:#{style['color']}" if style["color"] else "",
                    "font-weight:bold" if style["bold"] else "",
                    "font-style:italic" if style["italic"] else "",
                ],
            )
        )
        if css:
            out.append((pos, pos + len(value), css, ""))
        pos += len(value)
    return out


def _prose(text: str, tokens: TokenSpans, shade: bool, math: bool) -> str:
    """The prose as HTML: its math rendered (each formula's LaTeX in its tooltip), its tokens shaded."""
    if not math:
        return _spans(text, [_token_styles(text, tokens)] if shade else [])
    parts = pieces(text)
    shown = "".join(p.text for p in parts)
    formulas = [(a, b, "", f"LaTeX: {text[p.start : p.end]}") for a, b, p in rendered_spans(parts)]
    return _spans(shown, ([_token_styles(shown, tokens.through(parts))] if shade else []) + [formulas])


def _step(step: Step, heading: str, shade: bool, math: bool) -> str:
    c = step.cell
    parts = [f"<{heading}>Step {c.turn}{' · ✂ pruned' if c.pruned else ''}</{heading}>"]
    if c.pruned:
        parts.append(f'<div class="prune">{escape(pruned_words(c))}</div>')
    if c.edited:
        parts.append(f'<div class="prune edited">✎ {escape(c.edited)}</div>')
    prose_gone = " gone" if c.pruned and "model" in c.pruned.parts else ""  # struck through: left the context
    code_gone = " gone" if c.pruned and c.pruned.whole else ""
    if c.prose:
        parts.append(f'<div class="prose{prose_gone}">{_prose(c.prose, step.prose_tokens, shade, math)}</div>')
    if c.code is not None:
        layers = [_code_styles(c.code)] + ([_token_styles(c.code, step.code_tokens)] if shade else [])
        parts.append(f'<pre class="code{code_gone}">{_spans(c.code, layers)}</pre>')
        error = " error" if c.status in ("error", "timeout") else ""
        parts.append(f'<div class="status{error}{code_gone}">{escape(status_words(c))}</div>')
        if c.output.strip():
            parts.append(f'<pre class="output{code_gone}">{escape(c.output.rstrip())}</pre>')
    for v in c.verdicts:
        parts.append(f'<div class="verdict"><b>{escape(v.guard)}</b> · {escape(v.action)}: {escape(v.text)}</div>')
    if c.answer is not None:
        answer = render_latex(c.answer) if math else c.answer
        parts.append(
            f'<div class="answer">answer attempt: {escape(answer)}{" (final)" if c.answer_final else ""}</div>'
        )
    return f'<section class="step{" pruned" if c.pruned else ""}">{"".join(parts)}</section>'


def _facts(run: Run, math: bool) -> str:
    rows = "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>" for k, v in facts(run, math=math))
    return f'<table class="facts">{rows}</table>'


def _legend(shade: bool) -> str:
    if not shade:
        return ""
    spans = "".join(
        f'<span style="background:{colour}">p&lt;{upper:g}</span>'
        for upper, colour in zip(BAND_LIMITS, BAND_COLOURS, strict=True)
    )
    return f'<p class="legend">Token confidence ({escape(legend())}; hover a shaded token for its p): {spans}</p>'


def _page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{CSS}</style></head><body>{body}</body></html>\n"
    )


def _mark(run: Run) -> str:
    s = run.summary
    if s.correct is None:
        return ""
    return f' <span class="{"right" if s.correct else "wrong"}">{"✓ right" if s.correct else "✗ wrong"}</span>'


def run_html(run: Run, *, shade: bool = False, math: bool = True) -> str:
    title = f"tuiagent run · {answer_line(run, math=math)}"
    answer = run.summary.answer
    shown = "no answer" if not answer else render_latex(answer) if math else answer
    body = [f"<h1>tuiagent run · {escape(shown)}{_mark(run)}</h1>", _facts(run, math), _legend(shade)]
    body += [_step(step, "h2", shade, math) for step in run.steps]
    if run.warnings:
        body.append(f"<p>lines skipped in the file: {escape('; '.join(run.warnings))}</p>")
    return _page(title, "\n".join(body))


def comparison_html(runs: Sequence[Run], *, shade: bool = False, math: bool = True) -> str:
    names = [f"{i + 1}. {r.path.stem}" for i, r in enumerate(runs)]
    head = "".join(f"<th>{escape(n)}{_mark(r)}</th>" for n, r in zip(names, runs, strict=True))
    table = [dict(facts(r, math=math)) for r in runs]
    rows = [
        f"<tr><td>{escape(k)}</td>" + "".join(f"<td>{escape(t[k])}</td>" for t in table) + "</tr>"
        for k, _ in facts(runs[0])
    ]
    by_turn = [{s.cell.turn: s for s in r.steps} for r in runs]
    aligned = align([[s.cell for s in r.steps] for r in runs])
    diverge = first_divergence(aligned)
    steps = []
    for i, row in enumerate(aligned):
        cells = "".join(
            "<td>" + (_step(by_turn[k][c.turn], "h3", shade, math) if c is not None else "") + "</td>"
            for k, c in enumerate(row)
        )
        steps.append(f"<tr{' class=diverge' if i == diverge else ''}>{cells}</tr>")
    note = "" if diverge is None else "<p>The red line marks the first step where the runs differ.</p>"
    body = [
        f"<h1>tuiagent comparison of {len(runs)} runs</h1>",
        f'<table class="compare"><tr><th></th>{head}</tr>{"".join(rows)}</table>',
        _legend(shade),
        note,
        f'<table class="compare"><tr>{"".join(f"<th>{escape(n)}</th>" for n in names)}</tr>{"".join(steps)}</table>',
    ]
    return _page("tuiagent comparison", "\n".join(body))
