"""Choose the model: every entry of models.toml with its install state; enter loads the highlighted one."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from tuiagent.errors import UserError


class ModelsScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "close", "Close")]

    DEFAULT_CSS = """
    ModelsScreen { align: center middle; }
    ModelsScreen > Vertical { width: 90%; max-width: 110; height: auto; max-height: 80%;
                              border: round $accent; background: $surface; padding: 0 1; }
    ModelsScreen OptionList { height: auto; max-height: 20; border: none; }
    """

    def __init__(self, current: str):
        super().__init__()
        self.current = current
        self.ids: list[str] = []

    def compose(self) -> ComposeResult:
        from tuiagent.config.loader import load_models
        from tuiagent.config.sources import install_state

        options = []
        try:
            registry = load_models(self.app.config.models_file)
            for spec in registry:
                try:
                    state = install_state(spec)
                except Exception as e:  # noqa: BLE001 - one odd entry must not hide the others
                    state = f"unknown ({type(e).__name__})"
                self.ids.append(spec.id)
                options.append(Option(Content.assemble(
                    ("● " if spec.id == self.current else "  ", "$text-success"), (f"{spec.id:<24}", "bold"),
                    (f"{spec.backend:<10}", "$text-muted"), (state[:40], "$text-success" if state == "ready" else "$text-warning"))))
        except UserError as e:
            self.app.report(e, title="models.toml")
        with Vertical():
            yield Label("choose a model (enter loads it; the current one is unloaded)")
            yield OptionList(*options)

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.ids[event.option_index])

    def action_close(self) -> None:
        self.dismiss(None)
