"""Which readings of the papers an eval's settings ran under: for each setting, the choices of ours in
force (``guards.chain.ours_in_force``), so a table can say in one line which reading produced it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuiagent.errors import UserError

if TYPE_CHECKING:
    from tuiagent.core.run_spec import RunSpec


def choices_in_force(
    spec: RunSpec, model: str | None, models_file: Path | None = None
) -> tuple[list[str], list[tuple[str, str, Any, str]]]:
    """The guards ``spec`` turns on (on ``model``, its own values as a run starts) and, for each, the
    (guard, setting, value, doc) of every choice of ours in force. UserError for a model or guard not here."""
    from guards.chain import ours_in_force
    from tuiagent.runner import guard_chain, resolve_spec

    spec.settings()  # ValueError: a budget no run can keep
    chain = guard_chain(resolve_spec(model, models_file), spec, models_file)
    on = sorted(chain.enabled) if chain is not None else []
    return on, [(name, *row) for name in on for row in ours_in_force(name, chain.settings[name])] if chain else []


def setting_readings(settings: list[dict[str, Any]], model: str | None) -> dict[str, list[str]]:
    """Per setting of the manifest, ``guard.key = value`` for each choice of ours in force, with the
    model's own values (calibration, models.toml) as a run on it starts; {} when the model is not
    known here (copied results) and no setting can be rebuilt."""
    from tuiagent.core.run_spec import RunSpec

    out: dict[str, list[str]] = {}
    for s in settings:
        spec = RunSpec(guards=tuple(s.get("guards") or ()), guard_settings=s.get("guard_settings") or {})
        try:
            _, found = choices_in_force(spec, model)
        except (UserError, ValueError):  # a model or guard not installed here
            return {}
        out[s["name"]] = [f"{name}.{key} = {value!r}" for name, key, value, _ in found]
    return out


def readings_lines(readings: dict[str, list[str]]) -> list[str]:
    """The report's lines: each setting's count of choices of ours, and what they are."""
    lines = []
    for name, found in readings.items():
        if found:
            lines.append(f"`{name}`: {len(found)} choice(s) of ours in force: {'; '.join(found)}")
        else:
            lines.append(f"`{name}`: no choice of ours in force (no guard on, or the paper's reading throughout)")
    return lines
