"""The text of one model turn as it streams: prose with its math rendered (``tuiagent.mathtext``; the
raw LaTeX while :attr:`TurnText.math` is off), ```python blocks highlighted."""

from __future__ import annotations

import re

from textual import events
from textual.content import Content
from textual.geometry import Size
from textual.highlight import highlight
from textual.widget import Widget

from tuiagent.export.confidence import BAND_LIMITS, TokenSpans
from tuiagent.mathtext import Piece, pieces, rendered_spans
from tuiagent.safetext import for_terminal
from tuiagent.ui.token_shade import formulas, hovered, shade

# While a turn streams, its height grows by this many lines at a time, so the trajectory is laid out
# again every few lines instead of at every line (a layout repaints the whole pane: measured 30-50 ms
# with 24 turns at 120x40, bench/bench_ui_latency.py). Ours.
STREAM_SLACK_LINES = 4

_FENCE = re.compile(r"```python[^\n]*\n(.*?)(```|\Z)", re.DOTALL)


def render_turn(text: str) -> Content:
    """Prose as plain text (never markup), code fences highlighted as Python, even while still open."""
    text = for_terminal(text)
    parts: list[Content | tuple[str, str]] = []
    pos = 0
    for m in _FENCE.finditer(text):
        if m.start() > pos:
            parts.append(Content(text[pos : m.start()]))
        parts.append(("```python\n", "$text-muted"))
        parts.append(highlight(m.group(1), language="python"))
        if m.group(2):
            parts.append(("```", "$text-muted"))
        pos = m.end()
    if pos < len(text):
        parts.append(Content(text[pos:]))
    return Content.assemble(*parts) if parts else Content("")


class TurnText(Widget):
    """Appends are buffered; :meth:`flush` (called by the trajectory's throttle) renders them. Each
    token's probability is kept (:attr:`tokens`) and drawn as a shade while :attr:`shaded` is on;
    math is rendered while :attr:`math` is on (a rendered formula shaded as its least sure token)."""

    DEFAULT_CSS = """
    TurnText { height: auto; padding: 0 1; }
    TurnText.-empty { display: none; }
    """

    def __init__(self, turn: int, text: str = "", *, classes: str | None = None):
        super().__init__(classes=classes)
        self.turn = turn
        self._text = text
        self._pending: list[str] = []
        self._content: Content | None = None
        self.tokens = TokenSpans()
        self.shaded = False
        self.math = True
        self._shown: tuple[str, list[Piece] | None] | None = None  # the text as shown, and its pieces
        self._pending_stream = False  # tokens are arriving: the height grows in steps (STREAM_SLACK_LINES)
        self._reserved = 0  # lines held while streaming
        self.set_class(not text, "-empty", update=False)  # styled when mounted (a long replay makes thousands)

    @property
    def text(self) -> str:
        return self._text + "".join(self._pending)

    def append(self, piece: str, logprob: float | None = None) -> None:
        """Buffer a token; nothing is drawn until :meth:`flush`."""
        self._pending.append(piece)
        self.tokens.append(piece, logprob)

    def set_shaded(self, on: bool) -> None:
        if on != self.shaded:
            self.shaded = on
            self._content = None
            self.refresh()

    def set_math(self, on: bool) -> None:
        if on != self.math:
            self.math = on
            self._changed()

    def shown(self) -> tuple[str, list[Piece] | None]:
        """The text as shown (newlines at either end stripped) and, with math on, its pieces."""
        if self._shown is None:
            text = self._text.strip("\n")
            parts = pieces(text) if self.math else None
            self._shown = ("".join(p.text for p in parts), parts) if parts is not None else (text, None)
        return self._shown

    def flush(self) -> bool:
        if not self._pending:
            return False
        self._pending_stream = True
        self._text += "".join(self._pending)
        self._pending.clear()
        self._changed()
        return True

    def set_text(self, text: str) -> None:
        self._pending.clear()
        self.end_stream()
        if text != self._text:
            self._text = text
            self._changed()

    def _changed(self) -> None:
        self._content = None
        self._shown = None
        empty = not self._text.strip()
        if empty != self.has_class("-empty"):
            self.set_class(empty, "-empty", update=self.is_mounted)
            self.refresh(layout=True)
            return
        width, height = self.content_size
        # styles don't wrap. textual annotates get_height's rules as its RulesMap; it takes a widget's styles
        # (so its docstring says, and textual's own widgets pass theirs)
        lines = Content(self.shown()[0]).get_height(self.styles, width) if width else 0  # type: ignore[arg-type]
        if width and lines <= height and (lines == height or self._reserved):
            self.refresh()  # fits: repaint this widget only, no layout of the trajectory
        else:
            self._reserved = lines + STREAM_SLACK_LINES if self._pending_stream else 0
            self.refresh(layout=True)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(super().get_content_height(container, viewport, width), self._reserved)

    def end_stream(self) -> None:
        """The turn is complete: give back the lines reserved for it to grow into."""
        self._pending_stream = False
        if self._reserved:
            self._reserved = 0
            self.refresh(layout=True)

    def render(self) -> Content:
        if self._content is None:
            text, parts = self.shown()
            self._content = render_turn(text)
            if self.shaded:
                start = len(self._text) - len(self._text.lstrip("\n"))
                tokens = self.tokens.window(start, start + len(self._text.strip("\n")))
                self._content = shade(self._content, tokens.through(parts) if parts is not None else tokens)
                if parts is not None:
                    self._content = formulas(self._content, [(a, b) for a, b, _ in rendered_spans(parts)])
        return self._content

    def on_mouse_move(self, event: events.MouseMove) -> None:
        if self.shaded:
            self.tooltip = hovered(event, f"token p ≥ {BAND_LIMITS[-1]:g} (not shaded)")
