"""The interactive app: opens the Textual UI (tuiagent.ui) on the default model or the one asked for."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run_app(*, model: str | None = None, models_file: Path | None = None, preset: str | None = None,
            **options: Any) -> None:
    """Open the app with the guards of ``preset`` (default: the one ``solve`` starts from too).
    ``options`` are further :class:`tuiagent.ui.AppConfig` fields (script, screen, replay, compare,
    problem, gold ...)."""
    from tuiagent.presets import DEFAULT_PRESET, find_preset
    from tuiagent.ui import AppConfig, make_app

    p = find_preset(preset or DEFAULT_PRESET, model=model, models_file=models_file)
    guards = {"guards": p.guards, "guard_settings": {g: dict(v) for g, v in p.guard_settings.items()}}
    make_app(AppConfig(model=model, models_file=models_file, **{**guards, **options})).run()
