"""One run's configuration as the user gave it, and the one string grammar every front end reads.

A :class:`RunSpec` holds only what was given: which guards (None: not said), their settings, the
run's ``mode``, ``kernel`` and budgets, sampling, and the tool-use-tax condition it is. Presets,
compare columns, the app's config, an eval's settings and a fork hold one; front ends build one
from what the user typed and lay it over a preset with :meth:`RunSpec.merged` (later wins; given
beats default). The defaults live in one place, :class:`tuiagent.protocol.RunSettings` (and the
model's sampling), and apply only when the spec is turned into a run (:meth:`RunSpec.settings`).

The grammar (:class:`Grammar`): ``PARTS[:KEY=VALUE,...]``. PARTS are guard names, ``all``,
``none``, a condition or a preset name, joined by ``+``, commas or spaces; a ``KEY=VALUE`` word
may stand among them too (the compare column form, ``attc prunetir attc.threshold=0.9``). KEY is
``GUARD.KEY`` for a guard setting, or a run or sampling key (``RUN_KEYS``, ``SAMPLING_KEYS``).
``--set`` items are KEY=VALUE words alone (:meth:`Grammar.assignments`). docs/runs.md has examples.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tuiagent.errors import ConfigError
from tuiagent.protocol import BUDGETS, FIRST_CALLS, TOOLS, RunSettings

# [ours] The defaults, read (never restated) by the command-line help and the merge below.
DEFAULTS = RunSettings()
DEFAULT_KERNEL = "jupyter"  # [ours] the tool kernel, by its "tuiagent.kernels" entry-point name

# The keys a spec's ``run`` may hold (RunSettings' mode and budgets, and the kernel) and its ``sampling``.
RUN_KEYS: dict[str, type] = {
    "mode": str,
    "tool": str,
    "first_call": str,
    "kernel": str,
    "evidence": str,
    "max_tool_calls": int,
    "max_tokens": int,
    "exec_timeout_s": float,
    "output_chars": int,
    "max_wall_s": float,
}
# The run keys that are not RunSettings fields: the tool kernel, and the tool-use tax's ``evidence``
# ("oracle": a distractor variant runs on its clean question, Agent-OracleEvidence; the eval reads it).
NOT_SETTINGS = ("kernel", "evidence")
MODES = ("tool", "cot", "fcstyle")  # fcstyle: the tool prompt, no tool access (NoTool-FCStyle)
SAMPLING_KEYS: dict[str, type] = {
    "temperature": float,
    "top_p": float,
    "top_k": int,
    "repeat_penalty": float,
    "turn_max_tokens": int,
}
# Two limits were both called max_tokens: ``max_tokens`` is the run's budget (RunSettings), one
# turn's is ``turn_max_tokens``, held as Sampling's field; a TOML ``[sampling]`` table's
# ``max_tokens`` (models.toml's spelling) is one turn's too.
SAMPLING_FIELDS = {"turn_max_tokens": "max_tokens"}
_SAMPLING_WORDS = {field: key for key, field in SAMPLING_FIELDS.items()}


@dataclass(frozen=True)
class RunSpec:
    """What was given for a run; anything absent takes its default when the run is made."""

    guards: tuple[str, ...] | None = None  # None: not given (a fork keeps the parent's)
    guard_settings: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)
    run: dict[str, Any] = field(default_factory=dict, hash=False)  # RUN_KEYS
    sampling: dict[str, Any] = field(default_factory=dict, hash=False)  # SAMPLING_KEYS (and seed)
    condition: str | None = None  # the tool-use-tax condition this spec is, when it is one

    def merged(self, later: RunSpec) -> RunSpec:
        """``later`` laid over this one: its guards are added, each of its settings wins. A spec
        with guards is no longer a bare condition."""
        guards = (
            None
            if self.guards is None and later.guards is None
            else tuple(dict.fromkeys((*(self.guards or ()), *(later.guards or ()))))
        )
        settings = {g: dict(v) for g, v in self.guard_settings.items()}
        for g, values in later.guard_settings.items():
            settings.setdefault(g, {}).update(values)
        condition = None if guards else (later.condition if later.condition is not None else self.condition)
        return RunSpec(guards, settings, {**self.run, **later.run}, {**self.sampling, **later.sampling}, condition)

    @property
    def mode(self) -> str:
        return str(self.run.get("mode", DEFAULTS.mode))

    @property
    def kernel(self) -> str:
        """The kernel named, else the calculator for ``tool = "calculator"``, else DEFAULT_KERNEL."""
        default = "calculator" if self.run.get("tool") == "calculator" else DEFAULT_KERNEL
        return str(self.run.get("kernel", default))

    @property
    def evidence(self) -> str:
        """ "oracle": a distractor variant is run on its clean question (Agent-OracleEvidence)."""
        return str(self.run.get("evidence", "as written"))

    def settings(self) -> RunSettings:
        """The run's RunSettings: the given values over the defaults; every budget given is
        ``explicit`` (no guard raises it). Raises ValueError for a budget no run can keep."""
        given = {k: v for k, v in self.run.items() if k not in NOT_SETTINGS}
        return RunSettings(**given, explicit=tuple(k for k in BUDGETS if k in given))

    def describe(self) -> dict[str, Any]:
        """What the spec does, as a preset's fingerprint and an eval's manifest record it."""
        return {
            "guards": list(self.guards or ()),
            "guard_settings": self.guard_settings,
            "run": self.run,
            "sampling": self.sampling,
            "condition": self.condition,
        }


def convert(key: str, value: Any, where: str) -> Any:
    """A run or sampling value, checked and of its key's type (a string from the grammar or TOML's)."""
    kind = RUN_KEYS.get(key) or SAMPLING_KEYS[key]
    if kind is str:
        value = str(value)
        if key == "mode" and value not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}, not {value!r}", key=where)
        if key == "tool" and value not in TOOLS:
            raise ConfigError(f"tool must be one of {', '.join(TOOLS)}, not {value!r}", key=where)
        if key == "first_call" and value not in FIRST_CALLS:
            raise ConfigError(f"first_call must be one of {', '.join(FIRST_CALLS)}, not {value!r}", key=where)
        if key == "evidence" and value != "oracle":
            raise ConfigError(f"evidence can only be oracle, not {value!r}", key=where)
        return value
    if key == "max_wall_s" and (value is None or str(value).strip().lower() in ("none", "off")):
        return None  # no wall clock
    try:
        number = kind(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
        raise ConfigError(f"{key} must be a number, not {value!r}", key=where) from None
    if not math.isfinite(number):  # nan passes every comparison below, inf bounds nothing
        raise ConfigError(f"{key} must be a finite number, not {value!r}", key=where)
    least = 1 if key == "turn_max_tokens" else 0
    if number < least:
        raise ConfigError(f"{key} must be {least} or more, not {value!r}", key=where)
    return number


def assign(key: str, value: Any, where: str) -> RunSpec:
    """The spec that sets one KEY to VALUE: ``GUARD.KEY``, a run key or a sampling key."""
    if "." in key:
        guard, _, name = key.partition(".")
        if not (guard and name):
            raise ConfigError(f"{key!r} is not GUARD.KEY", key=where, fix="e.g. attc.threshold=0.95")
        return RunSpec(guard_settings={guard: {name: value}})
    if key in RUN_KEYS:
        return RunSpec(run={key: convert(key, value, where)})
    if key in SAMPLING_KEYS:
        return RunSpec(sampling={SAMPLING_FIELDS.get(key, key): convert(key, value, where)})
    known = ", ".join([*RUN_KEYS, *SAMPLING_KEYS])
    raise ConfigError(
        f"unknown setting {key!r}", key=where, fix=f"use GUARD.KEY=VALUE for a guard setting, or one of: {known}"
    )


def check_guards_on(spec: RunSpec, where: str) -> None:
    """A setting for a guard the spec does not turn on would be silently ignored: refuse it."""
    on = spec.guards or ()
    off = sorted(g for g in spec.guard_settings if g not in on and "all" not in on)
    if off:
        raise ConfigError(
            f"{where} sets {', '.join(off)}, which it does not turn on",
            fix=f"add {'+'.join(off)} to its guards, or drop the setting",
        )


_WORDS = re.compile(r"[+,\s]+")


@dataclass(frozen=True)
class Grammar:
    """The string form of a RunSpec, for the installed ``guards``, the tool-use-tax ``conditions``
    (name -> the run keys it sets) and the ``named`` presets."""

    guards: Sequence[str]
    conditions: Mapping[str, Mapping[str, Any]]
    named: Mapping[str, RunSpec] = field(default_factory=dict)

    def parse(self, text: str) -> RunSpec:
        """One setting string -> its spec (guards always given). A preset's name alone is that preset."""
        text = text.strip()
        if not text:
            raise ConfigError("an empty setting", fix="e.g. none, attc+prunetir, attc+prunetir:attc.threshold=0.9")
        if text in self.named:
            return self.named[text]
        head, colon, tail = text.partition(":")
        spec, conditions, bare = RunSpec(guards=()), [], True  # bare: nothing but `none`
        for word in (w for w in _WORDS.split(head) if w):
            if "=" in word:
                part = self.assignments([word], text)
            elif word.lower() == "none":
                continue
            elif word.lower() == "all":
                part = RunSpec(guards=("all",))
            elif word in self.conditions:
                conditions.append(word)
                part = RunSpec(run=dict(self.conditions[word]), condition=word)
            elif word in self.guards:
                part = RunSpec(guards=(word,))
            elif word in self.named:
                part = self.named[word]
            else:
                choices = ", ".join(["none", "all", *self.guards, *self.conditions, *self.named])
                raise ConfigError(
                    f"{text!r}: {word!r} is not a guard, a condition or a preset",
                    fix=f"use one of: {choices} (join with +)",
                )
            spec, bare = spec.merged(part), False
        if len(conditions) > 1:
            raise ConfigError(
                f"{text!r} names more than one condition ({', '.join(conditions)})",
                fix=f"give one of {', '.join(self.conditions)} per setting",
            )
        if colon:
            spec, bare = spec.merged(self.assignments(tail.split(","), text)), False
        if bare:  # `none` alone is the tool-use-tax baseline
            spec = RunSpec(guards=(), condition="full" if "full" in self.conditions else None)
        check_guards_on(spec, repr(text))
        return spec

    def assignments(self, items: Iterable[str], where: str = "--set") -> RunSpec:
        """``KEY=VALUE`` items (``--set``, or a setting's tail) -> the spec they set, later ones winning."""
        spec = RunSpec()
        for item in items:
            key, eq, value = item.partition("=")
            if not (eq and key.strip()):
                raise ConfigError(
                    f"{where}: {item.strip()!r} is not KEY=VALUE", fix="e.g. attc.threshold=0.9 or max_tool_calls=6"
                )
            spec = spec.merged(assign(key.strip(), value.strip(), where))
        return spec

    def text(self, spec: RunSpec) -> str:
        """The string :meth:`parse` reads back as ``spec``: its guards (or its condition, or
        ``none``), then every setting it gives."""
        cond = spec.condition if not spec.guards and spec.condition in self.conditions else None
        own = self.conditions[cond] if cond else {}
        items = setting_words(spec, besides=own)
        if cond and not own and not items:
            cond = None  # a condition that changes nothing (full) reads as `none`, which parses back to it
        head = "+".join(spec.guards or ()) or cond or "none"
        return head + (":" + ",".join(items) if items else "")


def setting_words(spec: RunSpec, besides: Mapping[str, Any] | None = None) -> list[str]:
    """Every setting ``spec`` gives, as KEY=VALUE words (what the grammar and ``--set`` read): guard
    settings, then run and sampling ones, but not those equal to ``besides`` (a condition's own)."""
    besides = besides or {}
    return [
        *(f"{guard}.{key}={value}" for guard, values in spec.guard_settings.items() for key, value in values.items()),
        *(f"{k}={v}" for k, v in spec.run.items() if k not in besides or besides[k] != v),
        *(f"{_SAMPLING_WORDS.get(k, k)}={v}" for k, v in spec.sampling.items()),
    ]
