"""The interactive app: opens the Textual UI (tuiagent.ui) on the default model or the one asked for."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuiagent.ui import AppConfig


def app_config(
    *, model: str | None = None, models_file: Path | None = None, preset: str | None = None, **options: Any
) -> AppConfig:
    """What ``tuiagent --preset P`` opens the app with: ``preset``'s spec (default: the one ``solve``
    starts from too), its guards, their settings, budgets, sampling, mode and kernel, as ``solve
    --preset`` runs them. ``options`` are further :class:`tuiagent.ui.AppConfig` fields (script,
    screen, replay, compare, problem, gold ...)."""
    from tuiagent.presets import DEFAULT_PRESET, find_preset
    from tuiagent.ui import AppConfig

    p = find_preset(preset or DEFAULT_PRESET, model=model, models_file=models_file)
    return AppConfig(model=model, models_file=models_file, run_spec=p.spec, **options)


def run_app(**options: Any) -> None:
    """Open the app with :func:`app_config`'s config for ``options``."""
    from tuiagent.ui import make_app

    make_app(app_config(**options)).run()
