"""Every key of the screen below, of the app, and of the widgets you can focus; and what the mouse does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from tuiagent.ui.run_screen import FieldsScreen
from tuiagent.ui.widgets.code_block import CodeBlockView
from tuiagent.ui.widgets.guard_list import GuardList
from tuiagent.ui.widgets.guard_panel import GuardPanel
from tuiagent.ui.widgets.step_header import StepHeader
from tuiagent.ui.widgets.tool_output import ToolOutput
from tuiagent.ui.widgets.trajectory import TrajectoryView

MOUSE = [
    ("click", "a code block or output focuses it; an output with hidden lines expands"),
    ("click", "a pruned step's ✂ line shows or hides the pruned branch"),
    ("click", "a guard row toggles the guard (or a yes/no setting); a number row opens its editor"),
    ("wheel", "scrolls the trajectory, the context, the comparison"),
    ("drag", "selects text; ctrl+c copies the selection"),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,f1", "close", "Close")]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; max-width: 100; height: 90%; border: round $accent;
                                  background: $surface; padding: 0 1; }
    HelpScreen .section { text-style: bold; color: $text-accent; margin-top: 1; }
    """

    def __init__(self, below: Screen[Any]):
        super().__init__()
        self.below = below

    def _rows(self, bindings: Sequence[object]) -> Content:
        lines = []
        for b in bindings:
            if not isinstance(b, Binding) or not b.description or b.system:
                continue
            keys = ", ".join(self.app.get_key_display(Binding(k.strip(), b.action)) for k in b.key.split(","))
            lines.append(Content.assemble((f"{keys:<22}", "bold"), b.description))
        return Content("\n").join(lines)

    def compose(self) -> ComposeResult:
        sections = [
            (f"This screen ({type(self.below).__name__.removesuffix('Screen').lower()})", list(self.below.BINDINGS)),
            (
                "Everywhere",
                list(self.app.BINDINGS)
                + [Binding("ctrl+p", "command_palette", "Command palette"), Binding("ctrl+q", "quit", "Quit")],
            ),
            ("Trajectory", list(TrajectoryView.BINDINGS) + [Binding("tab", "focus_next", "Next code block / output")]),
            ("A focused code block", list(CodeBlockView.BINDINGS)),
            ("A focused output", list(ToolOutput.BINDINGS)),
            ("A pruned step's ✂ line", list(StepHeader.BINDINGS)),
            (
                "Guard panel (ctrl+g)",
                list(GuardList.BINDINGS) + list(GuardPanel.BINDINGS) + [Binding("up,down", "x", "Move")],
            ),
        ]
        with VerticalScroll():
            yield Static(
                Content.styled("Keys  (esc closes; every action is also in the command palette, ctrl+p)", "bold")
            )
            fields = self.below.FIELDS if isinstance(self.below, FieldsScreen) else []
            if fields:
                yield Static("Fields (tab moves between them)", classes="section")
                yield Static(Content("\n").join(Content.assemble((f"{k:<22}", "bold"), v) for k, v in fields))
            for title, bindings in sections:
                yield Static(title, classes="section")
                yield Static(self._rows(bindings))
            panel = next(iter(self.below.query(GuardPanel)), None)
            if panel is not None:
                yield Static("Choices of ours in force (the guards on; `tuiagent guards --explain`)", classes="section")
                yield Static(self._ours(panel))
            yield Static("Mouse", classes="section")
            yield Static(Content("\n").join(Content.assemble((f"{k:<22}", "bold"), v) for k, v in MOUSE))

    @staticmethod
    def _ours(panel: GuardPanel) -> Content:
        """Each setting of a guard that is on whose value is not its paper's: tagged ours, or other than
        the paper's reading (a calibrated threshold); the paper profile (preset `paper`) has the fewest."""
        rows = [
            Content.assemble((f"{name}.{key} = {value!r}", "bold"), f"  {doc}")
            for name, state in panel.states.items()
            if state.enabled
            for key, value, doc in state.ours()
        ]
        if rows:
            return Content("\n").join(rows)
        on = any(state.enabled for state in panel.states.values())
        return Content("none: every guard on follows its paper's reading" if on else "no guard is on")

    def action_close(self) -> None:
        self.dismiss(None)
