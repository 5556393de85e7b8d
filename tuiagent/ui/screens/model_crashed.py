"""Offered when the model's process died: r reloads the model, n or esc leaves it for later (f5 reloads)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static


class ModelCrashedScreen(ModalScreen[bool]):
    BINDINGS = [
        Binding("r", "answer(True)", "Reload model"),
        Binding("n,escape", "answer(False)", "Not now"),
    ]

    DEFAULT_CSS = """
    ModelCrashedScreen { align: center middle; }
    ModelCrashedScreen > Vertical { width: 90%; max-width: 100; height: auto; max-height: 80%;
                                    border: round $error; background: $surface; padding: 0 1; }
    ModelCrashedScreen VerticalScroll { height: auto; max-height: 20; }
    ModelCrashedScreen Horizontal { height: auto; align-horizontal: right; }
    ModelCrashedScreen Button { margin-left: 1; }
    """

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("The model process crashed; the app is fine.  r reloads the model, n leaves it (f5 later)")
            with VerticalScroll():
                yield Static(self.message, markup=False)
            with Horizontal():
                yield Button("Reload model (r)", id="reload", variant="warning", compact=True)
                yield Button("Not now (n)", id="later", compact=True)

    def on_mount(self) -> None:
        self.watch(self.app, "model_state", self._model_state)

    def _model_state(self, state: tuple[str, str, str]) -> None:
        if state[1] != "crashed" and self.is_current:  # reloaded another way (f5, ctrl+l): nothing left to ask
            self.dismiss(False)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "reload")

    def action_answer(self, reload: bool) -> None:
        self.dismiss(reload)
