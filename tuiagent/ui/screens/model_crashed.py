"""Offered when the model's process died: r reloads the model, n or esc leaves it for later (f5 reloads)."""

from __future__ import annotations

from textual.binding import Binding

from tuiagent.ui.screens.question import QuestionScreen


class ModelCrashedScreen(QuestionScreen):
    BINDINGS = [
        Binding("r", "answer(True)", "Reload model"),
        Binding("n,escape", "answer(False)", "Not now"),
    ]

    def __init__(self, message: str) -> None:
        super().__init__(
            "The model process crashed; the app is fine.  r reloads the model, n leaves it (f5 later)",
            message,
            "Reload model (r)",
            "Not now (n)",
            classes="-error",
        )
        self.message = message

    def on_mount(self) -> None:
        self.watch(self.app, "model_state", self._model_state)

    def _model_state(self, state: tuple[str, str, str]) -> None:
        if state[1] != "crashed" and self.is_current:  # reloaded another way (f5, ctrl+l): nothing left to ask
            self.dismiss(False)
