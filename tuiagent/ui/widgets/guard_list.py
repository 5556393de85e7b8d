"""The guard rows: a guard's on/off line, then its main settings; changed with the keyboard or mouse."""

from __future__ import annotations

from textual.binding import Binding
from textual.content import Content
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from tuiagent.ui.guard_state import FieldInfo, GuardState, format_value

VALUE = Binding.Group("value")


class GuardList(OptionList):
    """space toggles a guard (or a yes/no setting), ←/→ change a value, enter types one."""

    BINDINGS = [
        Binding("space", "toggle_guard", "On/off"),
        Binding("left,minus", "step(-1)", "Decrease", group=VALUE),
        Binding("right,plus,equals_sign", "step(1)", "Increase", group=VALUE),
        Binding("enter", "edit", "Edit"),
    ]

    DEFAULT_CSS = """
    GuardList { height: 1fr; background: transparent; }
    GuardList:focus { background-tint: $foreground 3%; }
    """

    class Toggle(Message):
        def __init__(self, guard: str) -> None:
            super().__init__()
            self.guard = guard

    class Step(Message):
        def __init__(self, guard: str, info: FieldInfo, step: int) -> None:
            super().__init__()
            self.guard, self.info, self.step = guard, info, step

    class Edit(Message):
        def __init__(self, guard: str, info: FieldInfo | None) -> None:
            super().__init__()
            self.guard, self.info = guard, info

    def __init__(self, *, id: str | None = None):
        super().__init__(id=id, compact=True)
        self.rows: list[tuple[str, FieldInfo | None]] = []
        self.states: dict[str, GuardState] = {}

    def show(self, states: dict[str, GuardState]) -> None:
        """Redraw every row, keeping the highlight where it was."""
        self.states = states
        rows: list[tuple[str, FieldInfo | None]] = []
        for name, state in states.items():
            rows.append((name, None))
            rows.extend((name, info) for info in state.fields)
        if rows == self.rows and self.option_count == len(rows):
            for i, row in enumerate(rows):
                self.replace_option_prompt_at_index(i, self._prompt(*row))
            return
        keep = self.highlighted
        self.rows = rows
        self.set_options([Option(self._prompt(*row)) for row in rows])
        if rows:
            self.highlighted = min(keep or 0, len(rows) - 1)

    def _prompt(self, name: str, info: FieldInfo | None) -> Content:
        s = self.states[name]
        pending = Content.styled(" ⋯ next step", "italic $text-accent") if s.pending else Content("")
        if info is None:
            dot, style, state = ("●", "$text-success", "on") if s.enabled else ("○", "$text-muted", "off")
            why = Content.styled(" ⚠ could not start", "$text-error") if (s.reason and not s.enabled) else Content("")
            needs = Content.styled(f" {s.needs()}", "$text-muted") if s.enabled and not why else Content("")
            return Content.assemble((f"{dot} ", style), (f"{name:<10}", "bold"), (state, style), pending, why, needs)
        value = format_value(s.settings.get(info.name))
        hint = "◂ ▸" if info.kind in ("int", "float", "choice") else ("␣" if info.kind == "bool" else "⏎")
        label = info.name if len(info.name) <= 15 else info.name[:14] + "…"
        return Content.assemble(
            ("  ", ""), (f"{label:<16}", "$text-muted"), (f"{value:>6}", "bold"), (f" {hint}", "$text-muted")
        )

    def current(self) -> tuple[str, FieldInfo | None] | None:
        if self.highlighted is None or not (0 <= self.highlighted < len(self.rows)):
            return None
        return self.rows[self.highlighted]

    def action_toggle_guard(self) -> None:
        row = self.current()
        if row is None:
            return
        name, info = row
        if info is None:
            self.post_message(self.Toggle(name))
        elif info.kind in ("bool", "choice"):
            self.post_message(self.Step(name, info, 1))

    def action_step(self, step: int) -> None:
        row = self.current()
        if row is None:
            return
        name, info = row
        if info is None:
            self.post_message(self.Toggle(name))
        elif info.kind != "text":
            self.post_message(self.Step(name, info, step))

    def action_edit(self) -> None:
        row = self.current()
        if row is None:
            return
        name, info = row
        if info is None or info.kind in ("bool", "choice"):
            self.action_toggle_guard()
        else:
            self.post_message(self.Edit(name, info))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """A click (or enter) on a row: toggle a guard or a yes/no setting, edit a number."""
        event.stop()
        self.action_edit()
