"""Choose a preset for the guards: none, all, or a named preset; enter applies it."""

from __future__ import annotations

from textual.content import Content

from tuiagent.core.run_spec import setting_words
from tuiagent.presets import Preset
from tuiagent.ui.screens.chooser import ChooserScreen


class PresetsScreen(ChooserScreen):
    def __init__(
        self,
        presets: list[Preset],
        title: str = "apply a preset to the guards (enter); settings not in it go back to their defaults",
    ):
        super().__init__(title)
        self.presets = presets

    def choices(self) -> list[tuple[Content, Preset]]:
        return [
            (Content.assemble((f"{p.name:<14}", "bold"), " ".join(p.spec.guards or ()) or "no guards"), p)
            for p in self.presets
        ]

    def details(self, value: Preset) -> Content:
        """The preset's settings and its description, whole (a row has no room for them)."""
        settings = " ".join(setting_words(value.spec))
        return Content("\n".join(part for part in (settings, value.description) if part))
