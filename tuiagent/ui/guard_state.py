"""What the guard panel shows and edits: each guard on or off and its main settings (no UI code).

A change made while a run goes on is requested from the run's GuardChain; it applies at the next
decision point and the loop records it as a GuardToggled event, which clears the "pending" mark.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

from guards.base import parse_settings
from guards.chain import GuardChain, guard_class, ours_in_force


@dataclass(frozen=True)
class FieldInfo:
    name: str
    kind: str  # "bool", "int", "float", "choice", "text"
    choices: tuple[Any, ...] = ()
    doc: str = ""
    tag: str = "default"


@dataclass
class GuardState:
    name: str
    enabled: bool
    settings: dict[str, Any]
    doc: str = ""
    reason: str = ""  # why it is off (a guard that failed to start)
    pending: bool = False  # a change requested during a run, not applied yet
    fields: list[FieldInfo] = field(default_factory=list)

    def _parsed(self) -> Any:
        """The guard's Settings from the current values; None when they do not parse (the chain then
        switches the guard off and says why)."""
        try:
            return parse_settings(guard_class(self.name).Settings, self.settings, guard=self.name)
        except Exception:
            return None

    def ours(self) -> list[tuple[str, Any, str]]:
        """(setting, value, what it does) for each choice of ours in force with the current settings:
        what ``tuiagent guards --explain`` lists (``guards.chain.ours_in_force``); [] if they do not parse."""
        parsed = self._parsed()
        return [] if parsed is None else ours_in_force(self.name, parsed)

    def needs(self) -> str:
        """The run budgets the guard needs to act with its current settings (``run_budget``), in words."""
        declare = getattr(guard_class(self.name), "run_budget", None)
        parsed = self._parsed()
        if declare is None or parsed is None:
            return ""
        try:
            wants = declare(parsed)
        except Exception:  # the chain switches such a guard off and says why
            return ""
        return " ".join(f"{budget}≥{least:g}" for budget, least in wants.items())


def field_infos(name: str) -> list[FieldInfo]:
    guard = guard_class(name)
    cls = guard.Settings
    hints = typing.get_type_hints(cls)
    shown = getattr(guard, "main_settings", ()) or None  # the guard's own choice, else the first five
    out = []
    for f in dataclasses.fields(cls):
        if shown is not None and f.name not in shown:
            continue
        tp = hints[f.name]
        origin = typing.get_origin(tp)
        if origin is typing.Literal:
            kind, choices = "choice", typing.get_args(tp)
        elif tp is bool:
            kind, choices = "bool", ()
        elif tp in (int, float):
            kind, choices = tp.__name__, ()
        else:
            kind, choices = "text", ()
        out.append(FieldInfo(f.name, kind, choices, f.metadata.get("doc", ""), f.metadata.get("tag", "default")))
    if shown is None:
        return out[:5]
    return sorted(out, key=lambda fi: shown.index(fi.name))


def states_from_chain(chain: GuardChain) -> dict[str, GuardState]:
    """The panel's rows for a chain (every guard it knows, on or off)."""
    out = {}
    for name in sorted(chain.classes):
        cls = chain.classes[name]
        out[name] = GuardState(
            name=name,
            enabled=name in chain.enabled,
            settings=dataclasses.asdict(chain.settings[name]),
            doc=(cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else "",
            reason=chain.disabled_reason.get(name, ""),
            fields=field_infos(name),
        )
    return out


def adjusted(info: FieldInfo, value: Any, step: int) -> Any:
    """The value one step up (step > 0) or down: numbers move, booleans flip, choices cycle."""
    if info.kind == "bool":
        return not bool(value)
    if info.kind == "choice":
        i = info.choices.index(value) if value in info.choices else 0
        return info.choices[(i + step) % len(info.choices)]
    if info.kind == "int":
        return int(value or 0) + step
    if info.kind == "float":
        v = float(value or 0.0)
        delta = 0.01 if abs(v) <= 1.0 else 0.1
        return round(v + step * delta, 4)
    return value


def validate(name: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The settings as the guard parses them; raises SettingsError with a readable message."""
    return dataclasses.asdict(parse_settings(guard_class(name).Settings, settings, guard=name))


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value not in (0.0, 1.0) else f"{value:.1f}"
    return "none" if value is None else str(value)
