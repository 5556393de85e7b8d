"""A guard's own description of a verdict (``tuiagent.protocol.Display``) drawn with the app's theme."""

from __future__ import annotations

from textual.content import Content

from tuiagent.protocol import Gauge, Line, Span
from tuiagent.ui.widgets.confidence_bar import bar_content

_WORDS = {
    "muted": "$text-muted",
    "ok": "$text-success",
    "warn": "$text-warning",
    "error": "$text-error",
    "accent": "$text-accent",
}


def style(words: str) -> str:
    """A Span's style words (bold, italic, muted, ok, warn, error, accent) as a Textual style."""
    return " ".join(_WORDS.get(w, w) for w in words.split())


def line_content(line: Line) -> Content:
    parts: list[Content] = []
    for piece in line:
        if isinstance(piece, Gauge):
            parts.append(
                bar_content(
                    piece.value,
                    piece.mark,
                    width=piece.width,
                    lo=piece.lo,
                    hi=piece.hi,
                    log=piece.log,
                    above=style(piece.above),
                    below=style(piece.below),
                )
            )
        elif isinstance(piece, Span):
            parts.append(Content.styled(piece.text, style(piece.style)))
    return Content.assemble(*parts)
