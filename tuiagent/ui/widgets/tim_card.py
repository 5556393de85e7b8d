"""The TIM monitor's verdict on a finished run: flagged or not, and the phrases that raised the flag."""

from __future__ import annotations

from typing import Any

from textual.content import Content
from textual.widget import Widget


class TimCard(Widget):
    DEFAULT_CSS = """
    TimCard { height: auto; margin: 1 1 0 1; padding: 0 1; border-left: outer $secondary; }
    TimCard.-flagged { border-left: outer $warning; background: $warning-muted 30%; }
    TimCard.-current { background: $primary-muted; }
    """

    def __init__(self, turn: int, reason: str, data: dict[str, Any], *, classes: str | None = None):
        super().__init__(classes=classes)
        self.turn, self.reason, self.data = turn, reason, data
        self.set_class(bool(data.get("flagged")), "-flagged")

    def render(self) -> Content:
        d = self.data
        if not d.get("flagged"):
            return Content.assemble(("TIM ", "bold"), ("✓ no sign of tool-induced myopia", "$text-success"))
        lines = [Content.assemble(("TIM ", "bold"), ("⚑ tool-induced myopia flagged", "bold $text-warning"),
                                  (" (a hint, not proof)", "$text-muted"))]
        if d.get("answer_from_tool"):
            lines.append(Content.styled(
                f"answer repeats the last tool output with {d.get('words_after_output')} words of derivation after it",
                "$text-warning"))
        phrases = d.get("phrases") or []
        if phrases:
            lines.append(Content.assemble(("phrases: ", "$text-muted"),
                                          Content("; ").join(Content.styled(f"“{p}”", "italic") for p in phrases)))
        return Content("\n").join(lines)
