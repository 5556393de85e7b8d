"""G-STEP at one answer attempt: the attempted answer, p(continue) against tau, the decision and its reason."""

from __future__ import annotations

from typing import Any

from textual.content import Content
from textual.widget import Widget

from tuiagent.ui.widgets.confidence_bar import bar_content

_DECISION_STYLE = {
    "commit": "bold $text-success",
    "continue": "bold $text-warning",
    "replan": "bold $text-warning",
    "duplicate": "bold $text-warning",
    "safety stop": "bold $text-accent",
}


class GateCard(Widget):
    DEFAULT_CSS = """
    GateCard {
        height: auto; margin: 0 1; padding: 0 1;
        border-left: outer $secondary; background: $boost;
    }
    GateCard.-current { background: $primary-muted; }
    """

    def __init__(self, turn: int, answer: str | None, action: str, reason: str, data: dict[str, Any], *,
                 classes: str | None = None):
        super().__init__(classes=classes)
        self.turn, self.answer, self.action, self.reason, self.data = turn, answer, action, reason, data
        self.final: bool | None = None
        self.tooltip = "p(continue) on a log scale from 0.001 to 1; the marker is tau"

    def set_final(self, final: bool) -> None:
        self.final = final
        self.refresh(layout=True)

    def render(self) -> Content:
        d = self.data
        p, tau = d.get("p_continue"), d.get("tau")
        decision = d.get("decision", self.action)
        attempt = Content.assemble(
            ("G-STEP ", "bold"), ("answer attempt ", "$text-muted"), (self.answer or "?", "bold"),
            ("" if self.final is None else ("  (final)" if self.final else "  (not final: keep going)"),
             "$text-muted"),
        )
        gate = Content.assemble(
            ("p(continue) ", "$text-muted"),
            bar_content(p, tau, width=16, lo=0.001, hi=1.0, log=True, above="$text-warning", below="$text-success"),
            (f" {'n/a' if p is None else f'{p:.3f}'}", "bold"),
            (f"  τ {tau:g}" if tau is not None else "", "$text-muted"),
            ("  → ", "$text-muted"), (decision, _DECISION_STYLE.get(decision, "bold")),
        )
        why = Content.styled(f"reason: {d.get('reason') or self.reason}", "$text-muted")
        return Content("\n").join([attempt, gate, why])
