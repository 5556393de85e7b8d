"""The guard panel: every guard on/off with its main settings, changed while a run goes on; the
change applies at the next decision point and is recorded in the trajectory (GuardToggled)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.widgets import OptionList, Static

from tuiagent.core import events as ev
from tuiagent.ui.guard_state import GuardState
from tuiagent.ui.widgets.guard_list import GuardList


class GuardPanel(Vertical):
    """Messages up: :class:`GuardPanel.Changed`, :class:`GuardPanel.PresetWanted`; calls down:
    :meth:`show`, :meth:`confirm`."""

    BINDINGS = [
        Binding("p", "preset", "Preset"),
        Binding("a", "screen.all_guards", "All guards off/on", show=False),
        *(
            Binding(
                str(n),
                f"preset({n})",
                f"Preset {n}" + {0: " (none)", 1: " (all)"}.get(n, " (as p lists them)"),
                show=False,
            )
            for n in range(10)
        ),
    ]

    DEFAULT_CSS = """
    GuardPanel { width: 36; border: round $secondary; padding: 0 0; height: 1fr; }
    GuardPanel:focus-within { border: round $accent; }
    GuardPanel #guard-doc { height: 5; color: $text-muted; padding: 0 1; border-top: dashed $secondary; }
    """

    class Changed(Message):
        """The user changed a guard: ``enabled`` and/or one ``setting`` (name, new value)."""

        def __init__(
            self, guard: str, enabled: bool | None = None, setting: tuple[str, object] | None = None, edit: bool = False
        ) -> None:
            super().__init__()
            self.guard, self.enabled, self.setting, self.edit = guard, enabled, setting, edit

    class PresetWanted(Message):
        """The user asked to apply a preset: ``number`` (a digit key) or one to choose (p)."""

        def __init__(self, number: int | None = None) -> None:
            super().__init__()
            self.number = number

    def __init__(self, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.states: dict[str, GuardState] = {}
        self.border_title = "guards"
        self.border_subtitle = "␣ on/off · 0-9 preset · a all"

    def compose(self) -> ComposeResult:
        yield GuardList(id="guard-list")
        yield Static("", id="guard-doc")

    @property
    def list(self) -> GuardList:
        return self.query_one(GuardList)

    # -- calls down -----------------------------------------------------------------------------

    def show(self, states: dict[str, GuardState]) -> None:
        self.states = states
        self.list.show(states)
        self._describe()

    def confirm(self, e: ev.GuardToggled) -> None:
        """The run applied a change (or a guard turned itself off): show the state it has now."""
        s = self.states.get(e.guard)
        if s is None:
            return
        s.enabled, s.pending = e.enabled, False
        s.settings.update(e.settings)
        s.reason = "" if e.enabled or e.reason in ("changed during the run", "on at start") else e.reason
        self.list.show(self.states)

    def focus_list(self) -> None:
        self.list.focus()

    def action_preset(self, number: int | None = None) -> None:
        self.post_message(self.PresetWanted(number))

    # -- messages from the list -----------------------------------------------------------------

    def on_guard_list_toggle(self, message: GuardList.Toggle) -> None:
        message.stop()
        s = self.states[message.guard]
        self.post_message(self.Changed(message.guard, enabled=not s.enabled))

    def on_guard_list_step(self, message: GuardList.Step) -> None:
        message.stop()
        from tuiagent.ui.guard_state import adjusted

        s = self.states[message.guard]
        value = adjusted(message.info, s.settings.get(message.info.name), message.step)
        self.post_message(self.Changed(message.guard, setting=(message.info.name, value)))

    def on_guard_list_edit(self, message: GuardList.Edit) -> None:
        message.stop()
        if message.info is not None:
            self.post_message(self.Changed(message.guard, setting=(message.info.name, None), edit=True))

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._describe()

    def _describe(self) -> None:
        row = self.list.current()
        doc = self.query_one("#guard-doc", Static)
        if row is None:
            doc.update("", layout=False)  # its height is fixed (5): no layout of the screen per key
            return
        name, info = row
        s = self.states.get(name)
        if s is None:
            return
        if info is None:
            text = s.doc + (f"\noff: {s.reason}" if s.reason and not s.enabled else "")
            doc.update(Content(text), layout=False)
        else:
            tag = "ours" if info.tag == "default" else info.tag
            doc.update(Content.assemble((f"{name}.{info.name} [{tag}] ", "bold"), info.doc), layout=False)
