"""Choose a preset for the guard panel: none, all, or a named preset; enter applies it."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from tuiagent.core.compare import setting_words
from tuiagent.presets import Preset


class PresetsScreen(ModalScreen[Preset | None]):
    BINDINGS = [Binding("escape", "close", "Close")]

    DEFAULT_CSS = """
    PresetsScreen { align: center middle; }
    PresetsScreen > Vertical { width: 90%; max-width: 110; height: auto; max-height: 80%;
                               border: round $accent; background: $surface; padding: 0 1; }
    PresetsScreen OptionList { height: auto; max-height: 20; border: none; }
    """

    def __init__(self, presets: list[Preset]):
        super().__init__()
        self.presets = presets

    def compose(self) -> ComposeResult:
        options = []
        for p in self.presets:
            settings = " ".join(setting_words(p.guard_settings))
            options.append(Option(Content.assemble(
                (f"{p.name:<14}", "bold"), (" ".join(p.guards) or "no guards", ""), (f"  {settings}", "$text-muted"),
                (f"  {p.description[:60]}" if p.description else "", "$text-muted"))))
        with Vertical():
            yield Label("apply a preset to the guards (enter); settings not in it go back to their defaults")
            yield OptionList(*options)

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.presets[event.option_index])

    def action_close(self) -> None:
        self.dismiss(None)
