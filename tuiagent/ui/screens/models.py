"""Choose the model: every entry of models.toml with its install state; enter loads the highlighted one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.content import Content

from tuiagent.errors import UserError
from tuiagent.ui.screens.chooser import ChooserScreen

if TYPE_CHECKING:
    from textual import getters

    from tuiagent.ui.host import HostApp


class ModelsScreen(ChooserScreen):
    if TYPE_CHECKING:  # the app this runs in, typed the way textual types its own (textual.getters.app)
        app = getters.app(HostApp)

    def __init__(self, current: str):
        super().__init__("choose a model (enter loads it; the current one is unloaded)")
        self.current = current

    @property
    def ids(self) -> list[str]:
        return list(self.values)

    def choices(self) -> list[tuple[Content, str]]:
        from tuiagent.config.loader import load_models
        from tuiagent.config.sources import install_state

        rows = []
        try:
            registry = load_models(self.app.config.models_file)
            for spec in registry:
                try:
                    state = install_state(spec)
                except Exception as e:  # noqa: BLE001 - one odd entry must not hide the others
                    state = f"unknown ({type(e).__name__})"
                rows.append(
                    (
                        Content.assemble(
                            ("● " if spec.id == self.current else "  ", "$text-success"),
                            (f"{spec.id:<24}", "bold"),
                            (f"{spec.backend:<10}", "$text-muted"),
                            (state[:40], "$text-success" if state == "ready" else "$text-warning"),
                        ),
                        spec.id,
                    )
                )
        except UserError as e:
            self.app.report(e, title="models.toml")
        return rows
