"""Finding guards by entry point and consulting them in a fixed order.

Order when several guards act at one decision point (lower first):
  prunetir (10) -> necessity (20) -> attc (30) -> gstep (40) -> tim (50).
So PruneTIR decides about an erroneous call before ATTC appends its sentence, and a
verdict that truncates the context (a resample, or a suspension with ``truncate_to``) ends
the round (later guards would speak into a context that no longer exists).
A guard that raises is switched off for the rest of the run with a visible reason.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from guards.base import Guard, GuardBase, SettingsError, parse_settings
from tuiagent import plugins
from tuiagent.protocol import RESAMPLE, RunSettings, Verdict, with_guard_needs

GROUP = "tuiagent.guards"


def available() -> list[str]:
    """Names of the installed guards, without importing any of them."""
    return plugins.names(GROUP)


def guard_class(name: str) -> type[Any]:
    """The guard class registered as ``name``: duck-typed (``guards.base.Guard``: ``name``, ``order``,
    ``Settings`` and the hooks it has), usually, but not necessarily, a ``GuardBase``."""
    cls: type[Any] = plugins.load(GROUP, name, "guard", error=SettingsError)
    return cls


@functools.cache
def presenter(name: str) -> type[GuardBase]:
    """The class that describes ``name``'s verdicts: the installed guard, or the plain defaults for
    a guard recorded elsewhere and not installed here."""
    try:
        cls = guard_class(name)
    except (SettingsError, ImportError):
        return GuardBase
    return cls if isinstance(cls, type) and issubclass(cls, GuardBase) else GuardBase


@dataclass(frozen=True)
class Toggle:
    """A guard switched on or off (a requested change applied, or a guard that raised or failed to
    start); ``consult`` hands these back with its verdicts so the loop records them."""

    guard: str
    enabled: bool
    settings: dict[str, Any]
    reason: str


@dataclass(frozen=True)
class Change:
    """A request made while a run goes on, applied at the next decision point."""

    guard: str
    enabled: bool | None = None
    settings: dict[str, Any] | None = None


_RAISED = object()  # what ``GuardChain._ask`` returns for a guard that raised


class GuardChain:
    """The guards of one run. ``configs`` maps a guard name to its settings values; ``enabled`` names
    the guards that start on. Guards named in ``configs`` but not enabled can be switched on later."""

    def __init__(self, configs: dict[str, dict[str, Any]], enabled: set[str]):
        self.classes = {name: guard_class(name) for name in sorted(set(configs) | enabled)}
        self.settings = {
            name: parse_settings(cls.Settings, configs.get(name, {}), guard=name) for name, cls in self.classes.items()
        }
        self.instances: dict[str, Guard] = {}
        self.enabled: set[str] = set()
        self.disabled_reason: dict[str, str] = {}
        self._pending: list[Change] = []
        self._toggles: list[Toggle] = []
        for name in sorted(enabled):
            self._switch(name, True, reason="")

    # -- changes from outside (UI, CLI), applied at the next decision point --------------------

    def request(self, change: Change) -> None:
        """Queue a toggle or settings change; validated now so a bad value fails where it was typed."""
        if change.guard not in self.classes:
            self.classes[change.guard] = guard_class(change.guard)
            self.settings[change.guard] = self.classes[change.guard].Settings()
        if change.settings:
            parse_settings(self.classes[change.guard].Settings, change.settings, guard=change.guard)
        self._pending.append(change)

    def apply_pending(self) -> None:
        pending, self._pending = self._pending, []
        for change in pending:
            name = change.guard
            if change.settings:
                current = asdict(self.settings[name])
                self.settings[name] = parse_settings(
                    self.classes[name].Settings, {**current, **change.settings}, guard=name
                )
                if name in self.instances:
                    self.instances[name].settings = self.settings[name]
            enabled = name in self.enabled if change.enabled is None else change.enabled
            self._switch(name, enabled, reason="changed during the run")

    def _switch(self, name: str, on: bool, *, reason: str) -> None:
        if on:
            if name not in self.instances:
                try:
                    self.instances[name] = self.classes[name](self.settings[name])
                except Exception as e:  # a guard that cannot start (say, a missing weights file) stays off
                    self.disabled_reason[name] = f"{type(e).__name__}: {e}"
                    self._toggled(name, False, self.disabled_reason[name])
                    return
            self.enabled.add(name)
            self.disabled_reason.pop(name, None)
        else:
            self.enabled.discard(name)
        self._toggled(name, on, reason)

    def _toggled(self, name: str, on: bool, reason: str) -> None:
        self._toggles.append(Toggle(name, on, asdict(self.settings[name]), reason))

    # -- consulting ---------------------------------------------------------------------------

    def ordered(self) -> list[Guard]:
        guards = [self.instances[n] for n in self.enabled]
        return sorted(guards, key=lambda g: (g.order, g.name))

    def needs(self) -> dict[str, dict[str, float]]:
        """The run budgets each guard that is on declares it needs (``GuardBase.run_budget``). A
        guard whose declaration raises or names no run budget is switched off with that reason."""
        out = {}
        for name in sorted(self.enabled):
            declare = getattr(self.classes[name], "run_budget", None)
            if declare is None:
                continue
            try:
                wants = dict(declare(self.settings[name]) or {})
                with_guard_needs(RunSettings(), {name: wants})  # checks the names and the values
            except Exception as e:
                self.enabled.discard(name)
                self.disabled_reason[name] = f"{type(e).__name__} in run_budget: {e}"
                continue
            if wants:
                out[name] = wants
        return out

    def start(self) -> list[Toggle]:
        """The guards' state as the run starts: each one on, and each one that could not start."""
        self._toggles.clear()
        on = [Toggle(n, True, asdict(self.settings[n]), "on at start") for n in sorted(self.enabled)]
        off = [Toggle(n, False, asdict(self.settings[n]), why) for n, why in sorted(self.disabled_reason.items())]
        return on + off

    async def rebuild(self, hook: str, *args: Any, parent: Mapping[str, Any]) -> list[str]:
        """A fork takes over its parent's steps: each guard that carries state (``carries_state``) and
        was on in the parent with the settings it has here (``parent``: name -> settings, as the
        parent's GuardToggled events recorded them) is asked ``hook`` again at one of the parent's
        steps; what it says is not acted on (the parent's record has it). A guard that raises is
        switched off, as in ``consult``. Returns the names asked."""
        asked = []
        for guard in self.ordered():
            if not getattr(type(guard), "carries_state", False) or _as_json(parent.get(guard.name)) != _as_json(
                asdict(self.settings[guard.name])
            ):
                continue
            if await self._ask(guard, hook, args, during=", taking over the parent's steps") is not _RAISED:
                asked.append(guard.name)
        return asked

    async def _ask(self, guard: Guard, hook: str, args: tuple[Any, ...], during: str = "") -> Any:
        """What ``guard``'s ``hook`` says (None without one; a coroutine is awaited); a guard that raises
        is switched off with the reason, and ``_RAISED`` returned."""
        method = getattr(guard, hook, None)
        if method is None:
            return None
        try:
            said = method(*args)
            return await said if inspect.isawaitable(said) else said
        except Exception as e:
            self.enabled.discard(guard.name)
            self.disabled_reason[guard.name] = f"{type(e).__name__} in {hook}{during}: {e}"
            self._toggled(guard.name, False, self.disabled_reason[guard.name])
            return _RAISED

    async def consult(self, hook: str, *args: Any) -> tuple[list[Verdict], list[Toggle]]:
        """Ask every enabled guard that has ``hook``; stop after a verdict that truncates the context.
        A hook may be a coroutine function (a guard that asks the model through ``view.judge``).
        Returns the verdicts and the toggles made on the way (pending changes applied first, then
        any guard that raised, switched off)."""
        self.apply_pending()
        verdicts = []
        for guard in self.ordered():
            verdict = await self._ask(guard, hook, args)
            if verdict is None or verdict is _RAISED:
                continue
            verdicts.append(verdict if verdict.guard else replace(verdict, guard=guard.name))
            if verdict.action == RESAMPLE or verdict.truncate_to is not None:
                break  # the context was cut back: later guards would speak about text that is gone
        toggles, self._toggles = self._toggles, []
        return verdicts, toggles


def paper_settings(names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The paper profile for the guards ``names``: the settings that give each one its paper's (or
    reference code's) reading where the default is ours (``paper_reading``)."""
    out = {}
    for name in names:
        reading = getattr(guard_class(name), "paper_reading", {})
        if reading:
            out[name] = dict(reading)
    return out


def ours_in_force(name: str, settings: Any) -> list[tuple[str, Any, str]]:
    """(setting, value, what it does) for each of guard ``name``'s settings whose value in ``settings``
    is not the paper's: tagged ours and left at its default, or other than the paper reading (a
    calibrated threshold, say; its doc then starts "not the paper's reading (...)")."""
    cls = guard_class(name)
    defaults, reading = cls.Settings(), getattr(cls, "paper_reading", {})
    found = []
    for f in dataclasses.fields(cls.Settings):
        value = getattr(settings, f.name)
        ours = f.metadata.get("tag", "default") == "default" and value == getattr(defaults, f.name)
        doc = str(f.metadata.get("doc", ""))
        if f.name in reading and value != reading[f.name]:
            found.append((f.name, value, f"not the paper's reading ({reading[f.name]!r}): {doc}"))
        elif ours:
            found.append((f.name, value, doc))
    return found


def _as_json(value: Any) -> Any:
    """A value as JSON reads it back (tuples as lists): settings from a record and from a guard compare equal."""
    return json.loads(json.dumps(value, default=str))
