"""The fault kinds to arm for the next tool output of a running solve (ctrl+b; docs/app.md)."""

from __future__ import annotations

from textual.content import Content

from tuiagent.core.faults import DESCRIPTIONS, KINDS
from tuiagent.ui.screens.chooser import ChooserScreen


class FaultMenuScreen(ChooserScreen):
    """enter (or the row's digit) arms that fault; esc arms none."""

    def __init__(self) -> None:
        super().__init__("Inject a fault into the next tool output (the model reads it; the kernel keeps its state)")

    def choices(self) -> list[tuple[Content, str]]:
        return [(Content.assemble((f"{kind:<13}", "bold"), DESCRIPTIONS[kind]), kind) for kind in KINDS]
