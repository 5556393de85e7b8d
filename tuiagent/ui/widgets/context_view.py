"""What the model saw: the working context at the replay position, segment by segment. Segments added
by the current event stand out; segments it removed (a prune) are listed below, struck through."""

from __future__ import annotations

from textual.containers import VerticalScroll
from textual.content import Content
from textual.highlight import highlight
from textual.widgets import Static

from tuiagent.core.context import WorkingContext
from tuiagent.protocol import Segment

_STYLE = {
    "prompt": "$text-muted",
    "model": "",
    "tool": "$text-success",
    "note": "italic $text-secondary",
}


def _key(s: Segment) -> tuple[object, ...]:
    return (s.kind, s.turn, s.call, s.source, s.text)


def segment_content(s: Segment) -> Content:
    """A segment as drawn: code highlighted between muted fences, every character kept."""
    if s.kind != "code":
        return Content.styled(s.text, _STYLE.get(s.kind, ""))
    text = s.text
    trail = "\n" if text.endswith("\n") else ""
    lines = (text[:-1] if trail else text).split("\n")
    head = lines.pop(0) if lines and lines[0].startswith("```") else None
    tail = lines.pop() if lines and lines[-1].strip().startswith("```") else None
    parts = [Content.styled(head, "$text-muted")] if head is not None else []
    if lines:
        parts.append(highlight("\n".join(lines), language="python"))
    if tail is not None:
        parts.append(Content.styled(tail, "$text-muted"))
    return Content("\n").join(parts) + trail


class ContextView(VerticalScroll, can_focus=True):
    DEFAULT_CSS = """
    ContextView { height: 1fr; }
    ContextView > Static { padding: 0 1; }
    ContextView > .-new { background: $accent-muted; }
    ContextView > .-removed { color: $text-error; text-style: strike; }
    ContextView > .-label { color: $text-muted; text-style: italic; padding: 0 1; }
    """

    def __init__(self, *, id: str | None = None):
        super().__init__(id=id)
        self.border_title = "what the model saw"
        self._shown = 0  # show() calls so far: only the latest one scrolls

    def show(self, context: WorkingContext | None, previous: WorkingContext | None = None) -> None:
        """Draw ``context``; what differs from ``previous`` (the context one event earlier) is marked."""
        self.remove_children()
        if context is None:
            self.mount(Static("(no context yet)", classes="-label"))
            return
        before = {_key(s) for s in previous.segments} if previous is not None else set()
        after = {_key(s) for s in context.segments}
        widgets = []
        new = None
        for s in context.segments:
            w = Static(segment_content(s), classes="-new" if previous is not None and _key(s) not in before else "")
            widgets.append(w)
            if new is None and w.has_class("-new"):
                new = w
        removed = [s for s in (previous.segments if previous is not None else []) if _key(s) not in after]
        if removed:
            widgets.append(
                Static(f"removed by this event ({sum(len(s.text) for s in removed)} chars):", classes="-label")
            )
            widgets.extend(Static(Content(s.text), classes="-removed") for s in removed)
            new = new or widgets[-len(removed) - 1]
        self.border_subtitle = f"{len(context.segments)} segments · {len(context.text)} chars"
        self._shown += 1
        shown, mounted = self._shown, self.mount_all(widgets)

        async def scroll_once_laid_out() -> None:
            # Scrolling before the new widgets are mounted and laid out lands on old positions (seen
            # on a loaded machine), and a later show() owns the view.
            await mounted
            if shown == self._shown:
                self.call_after_refresh(self._scroll_to_change, new)

        self.call_later(scroll_once_laid_out)

    def _scroll_to_change(self, target: Static | None) -> None:
        """The first new or removed segment at the top, or the end when nothing changed."""
        if target is not None:
            self.scroll_to_widget(target, animate=False, top=True)
        else:
            self.scroll_end(animate=False)
