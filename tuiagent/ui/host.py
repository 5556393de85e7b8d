"""The app as its screens see it: the controller, the display switches every screen follows, and
the one way to report an error. ``TuiAgentApp`` is one; the screens type ``self.app`` as this
class, so none of them imports the app (which imports them all).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import work
from textual.reactive import reactive

from tuiagent.ui.controller import AppConfig, AppController, ModelState
from tuiagent.ui.errors import describe_error
from tuiagent.ui.key_order import KeysInOrder
from tuiagent.ui.messages import RunPicked
from tuiagent.ui.session import ModelSession


class HostApp(KeysInOrder):
    """What a screen may read of the app it runs in, and ``report``."""

    controller: AppController
    model_state: reactive[ModelState] = reactive(("", "idle", ""))
    shade_tokens: reactive[bool] = reactive(False)  # token confidence drawn (f8), on every screen
    raw_math: reactive[bool] = reactive(False)  # the model's LaTeX shown as written (f10), on every screen

    @property
    def config(self) -> AppConfig:
        return self.controller.config

    @property
    def session(self) -> ModelSession:
        return self.controller.session

    @property
    def errors(self) -> list[str]:
        return self.controller.errors

    @property
    def pending(self) -> dict[str, Any]:
        return self.controller.pending

    def report(self, error: BaseException | str, *, title: str = "error") -> None:
        """Show an error as a notice (kept in ``errors``, which the tests and the help screen read)."""
        text = error if isinstance(error, str) else describe_error(error)
        self.errors.append(f"{title}: {text}")
        self.notify(text, title=title, severity="error", timeout=12)

    def action_open_run(self) -> None:
        """Ask which saved run to open (ctrl+o); the app routes the pick (``messages.RunPicked``)."""
        from tuiagent.ui.screens.open_run import OpenRunScreen

        if not isinstance(self.screen, OpenRunScreen):
            self.push_screen(OpenRunScreen(), self._picked)

    def _picked(self, pick: tuple[str, list[Path]] | None) -> None:
        if pick:
            self.post_message(RunPicked(pick))

    def ensure_model(self) -> None:
        """Start loading the model unless it is loaded, loading, or failed."""
        if self.controller.needs_load():
            self.load_model()

    @work(thread=True, exclusive=True, group="model", exit_on_error=False, name="load model")
    def load_model(self) -> None:
        self.session.load_blocking()
        self.call_from_thread(self._model_loaded)

    def _model_loaded(self) -> None:
        self.controller.loaded()
        self.notify(f"{self.session.model_id} is loaded", timeout=3)

    def can_run(self) -> bool:
        """Whether a run can start; if not (the model failed to load or crashed), says why."""
        why = self.controller.refusal()
        if why is not None:
            self.report(why, title="no model")
        return why is None
