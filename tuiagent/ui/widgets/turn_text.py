"""The text of one model turn as it streams: prose as written, ```python blocks highlighted."""

from __future__ import annotations

import re

from textual.content import Content
from textual.highlight import highlight
from textual.widget import Widget

from tuiagent.safetext import for_terminal

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
    """Appends are buffered; :meth:`flush` (called by the trajectory's throttle) renders them."""

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
        self.set_class(not text, "-empty")

    @property
    def text(self) -> str:
        return self._text + "".join(self._pending)

    def append(self, piece: str) -> None:
        """Buffer a token; nothing is drawn until :meth:`flush`."""
        self._pending.append(piece)

    def flush(self) -> bool:
        if not self._pending:
            return False
        self._text += "".join(self._pending)
        self._pending.clear()
        self._changed()
        return True

    def set_text(self, text: str) -> None:
        self._pending.clear()
        if text != self._text:
            self._text = text
            self._changed()

    def _changed(self) -> None:
        self._content = None
        empty = not self._text.strip()
        if empty != self.has_class("-empty"):
            self.set_class(empty, "-empty")
            self.refresh(layout=True)
            return
        width, height = self.content_size
        if width and self.render().get_height(self.styles, width) == height:
            self.refresh()  # same number of lines: repaint this widget only, no layout of the trajectory
        else:
            self.refresh(layout=True)

    def render(self) -> Content:
        if self._content is None:
            self._content = render_turn(self._text.strip("\n"))
        return self._content
