"""A model's calibration file (written by ``tuiagent calibrate``), named from models.toml::

    [models."qwen2.5-coder-1.5b"]
    calibration = "calibration/qwen2.5-coder-1.5b.toml"   # relative to that models.toml

The file holds ``[calibration]`` (model, date, data, sizes, the report's file name), one
``[guards.<guard>]`` table per fitted guard, whose values become the model's guard defaults
(below its own ``[models.<id>.guards.<guard>]`` table and below what the user sets for a run), and
``[presets.<name>]`` tables (a per-model ``recommended``) in the presets.toml format, read by
``tuiagent.presets``. A value in the guard tables written as a relative path, starting with "./"
or "../" (the G-STEP gate, ``"./MODEL-gstep.npz"``), names a file relative to the calibration file:
so the directory can move as a whole, and this reader knows no guard's settings.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuiagent.errors import ConfigError
from tuiagent.safe_read import CONFIG_BYTES, UnreadableFile, read_text

META_KEYS = {
    "model": str,
    "date": str,
    "data": str,
    "questions": str,
    "train_questions": int,
    "reused_questions": int,
    "heldout_questions": int,
    "report": str,
    "command": str,
}
RELATIVE = ("./", "../")  # a guard value starting so is a file relative to the calibration file


@dataclass(frozen=True)
class Calibration:
    """The values of one calibration file; ``file`` is its absolute path."""

    file: str
    meta: dict[str, Any]
    guards: dict[str, dict[str, Any]] = field(default_factory=dict)


def load_calibration(path: str | Path) -> Calibration:
    """Read and check a calibration file; any problem is a ConfigError naming the file."""
    file = str(Path(path).expanduser().absolute())
    try:
        data = tomllib.loads(read_text(file, limit=CONFIG_BYTES, what="calibration file"))
    except UnreadableFile as e:
        if not e.missing:
            raise
        raise ConfigError(
            "calibration file not found",
            file=file,
            fix="run `tuiagent calibrate MODEL`, or correct or remove the model's `calibration` key",
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"not valid TOML: {e}", file=file, fix="correct the syntax at that line") from None
    unknown = sorted(set(data) - {"calibration", "guards", "presets"})
    if unknown:
        raise ConfigError(
            f"unknown table(s) {', '.join(unknown)}",
            file=file,
            fix="a calibration file has [calibration], [guards.<guard>] and [presets.<name>]",
        )
    meta = data.get("calibration")
    if not isinstance(meta, dict) or "model" not in meta:
        raise ConfigError(
            "no [calibration] table with the model it was fitted on",
            file=file,
            key="calibration",
            fix='add [calibration] with model = "<model id>" (tuiagent calibrate writes it)',
        )
    for key, value in meta.items():
        kind = META_KEYS.get(key)
        if kind is None:
            raise ConfigError("unknown key", file=file, key=f"calibration.{key}", fix=f"use {', '.join(META_KEYS)}")
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ConfigError(
                f"expected {kind.__name__}, got {value!r}",
                file=file,
                key=f"calibration.{key}",
                fix="rerun `tuiagent calibrate`",
            )
    guards = data.get("guards", {})
    if not isinstance(guards, dict):
        raise ConfigError("must be a table of [guards.<guard>] tables", file=file, key="guards")
    out: dict[str, dict[str, Any]] = {}
    for guard, values in guards.items():
        if not isinstance(values, dict):
            raise ConfigError(
                "must be a table of settings", file=file, key=f"guards.{guard}", fix=f"write it as [guards.{guard}]"
            )
        out[guard] = dict(values)
        for key, value in values.items():
            if isinstance(value, str) and value.startswith(RELATIVE):
                out[guard][key] = str(Path(file).parent / value)
    presets = data.get("presets", {})
    if not isinstance(presets, dict):
        raise ConfigError("must be a table of [presets.<name>] tables", file=file, key="presets")
    return Calibration(file=file, meta=dict(meta), guards=out)


def merge_guards(calibrated: dict[str, dict[str, Any]], own: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A model's guard settings: the calibration's, with its own models.toml values winning key by key."""
    out = {g: dict(v) for g, v in calibrated.items()}
    for guard, values in own.items():
        out.setdefault(guard, {}).update(values)
    return out
