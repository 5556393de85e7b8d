"""The interactive app: opens the Textual UI (tuiagent.ui) on the default model or the one asked for."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run_app(*, model: str | None = None, models_file: Path | None = None, **options: Any) -> None:
    """Open the app. ``options`` are further :class:`tuiagent.ui.AppConfig` fields (script, screen,
    replay, compare, problem, gold ...)."""
    from tuiagent.ui import AppConfig, make_app

    make_app(AppConfig(model=model, models_file=models_file, **options)).run()
