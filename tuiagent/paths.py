"""Where tuiagent keeps its files, per user (platformdirs), each overridable by an environment variable.

- config: ``$TUIAGENT_CONFIG_DIR`` or the platform's config dir; the user's ``models.toml`` lives there.
- data:   ``$TUIAGENT_DATA_DIR`` or the platform's data dir; trajectories under ``runs/``.
- cache:  ``$TUIAGENT_CACHE_DIR`` or the platform's cache dir; assembled models under ``models/``.

The functions read the environment on every call (tests point them at ``tmp_path``) and create nothing;
callers that write make the directory they need.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "tuiagent"
CONFIG_ENV = "TUIAGENT_CONFIG_DIR"
DATA_ENV = "TUIAGENT_DATA_DIR"
CACHE_ENV = "TUIAGENT_CACHE_DIR"


def _dir(env: str, default: str) -> Path:
    value = os.environ.get(env, "").strip()
    return Path(value).expanduser() if value else Path(default)


def config_dir() -> Path:
    return _dir(CONFIG_ENV, platformdirs.user_config_dir(APP, appauthor=False))


def data_dir() -> Path:
    return _dir(DATA_ENV, platformdirs.user_data_dir(APP, appauthor=False))


def cache_dir() -> Path:
    return _dir(CACHE_ENV, platformdirs.user_cache_dir(APP, appauthor=False))


def user_models_file() -> Path:
    """The user's models.toml (may not exist)."""
    return config_dir() / "models.toml"


def runs_dir() -> Path:
    """Where run trajectories are written."""
    return data_dir() / "runs"


def models_cache_dir() -> Path:
    """Where models assembled from chunk packages are kept."""
    return cache_dir() / "models"
