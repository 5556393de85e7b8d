"""The guard protocol: pure decision code consulted by the loop at its decision points.

A guard sees a read-only :class:`RunView` and returns :class:`Verdict` objects; only the
loop acts on them (inject text into the assistant's continuation, prune or truncate the
working context, skip a code block, suspend tools, continue after an answer). Guards never
call the kernel or the UI; a guard that needs the model gets a narrow callable (``judge``).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import field
from typing import Any, ClassVar, Protocol, TypeVar, cast

from tuiagent.protocol import (
    PASS,
    SUSPEND,
    Call,
    Display,
    RunRecord,
    RunView,
    Verdict,
    VerdictRecord,
    tools_return_turn,
)

# What a hook returns: a Verdict, None (nothing to say), or an awaitable of either: a hook may be a
# coroutine function (necessity's on_code, which asks a judge model through ``view.judge``).
HookResult = Verdict | None | Awaitable[Verdict | None]


class Guard(Protocol):
    """What ``guards.chain.GuardChain`` needs of every guard: ``name`` and ``order`` (class
    attributes), a ``Settings`` dataclass, a constructor that takes one, and ``settings``, the one it
    runs with (the chain sets it when the settings change during a run). ``order``: when several
    guards act at one point, lower runs first (see the order in guards.chain's docstring).

    The hooks (``GuardHooks``) are optional: a guard implements the ones it needs, and the chain
    looks each one up by name and awaits what it returns when that is awaitable. So is
    ``run_budget``, a classmethod: run_budget(settings) -> {budget: least value} (see
    ``GuardBase.run_budget``).
    """

    name: ClassVar[str]
    order: ClassVar[int]
    Settings: ClassVar[type]
    settings: Any


class GuardHooks(Protocol):
    """The hooks a guard may implement (any of them; see ``Guard``), each reading a ``RunView``."""

    def on_start(self, view: RunView) -> HookResult: ...

    def on_code(self, code: str, view: RunView) -> HookResult: ...

    def on_tool_result(self, call: Call, view: RunView) -> HookResult: ...

    def on_answer(self, answer: str | None, view: RunView) -> HookResult:
        """At a final submission (a turn that ends without a tool call): ``answer`` is its
        \\boxed{} answer, None when it has none. CONTINUE sends it back for another turn."""

    def on_finish(self, view: RunView) -> HookResult: ...


_Data = TypeVar("_Data")


def verdict_data(v: VerdictRecord, schema: type[_Data]) -> _Data:
    """A recorded verdict's ``data`` as the type checker should read it: ``schema`` is the guard's
    ``TypedDict`` of its verdict data (``ATTCData``...). No copy and no check at run time (the data
    is the plain dict of the trajectory, and a record written by another version may lack keys), so
    read with ``get`` into annotated names: mypy gives a known key its value type and an unknown
    key ``object``, so a misspelt key fails the annotation."""
    return cast(_Data, v.data)


class GuardBase:
    """What a guard says about itself, for everything that shows or counts its verdicts: replay,
    compare, the app's trajectory and guard panel, the eval's metrics and summary. Those read a
    guard only through these class-level methods (a recorded verdict is enough: no instance, no
    model), so a new guard needs no change anywhere else. A guard overrides what it needs; the
    defaults describe any verdict plainly (and stand in for a guard that is not installed here).

    A guard describes the ``data`` of its verdicts with a ``TypedDict`` (say ``ATTCData``): it builds
    the data as one, and its methods here read a record's data through it (``verdict_data``).
    """

    name: ClassVar[str] = ""
    order: ClassVar[int] = 100
    main_settings: ClassVar[tuple[str, ...]] = ()  # what the guard panel shows (empty: the first five)
    summary: ClassVar[tuple[tuple[str, str], ...]] = ()  # (metric, column header): totals in eval reports
    # The settings that give the paper's (or its reference code's) reading where the default is ours:
    # what the paper profile (preset `paper`, --faithful) sets.
    paper_reading: ClassVar[Mapping[str, Any]] = {}
    # A guard whose decisions depend on the steps before (an open error episode, the continues it
    # gave): a fork shows it the parent's steps again, so it goes on from the state the parent left
    # (``GuardChain.rebuild``) [ours].
    carries_state: ClassVar[bool] = False

    @classmethod
    def note(cls, v: VerdictRecord) -> str:
        """The verdict in one short line (a compare cell, replay's event list)."""
        return v.reason or v.action

    @classmethod
    def display(cls, v: VerdictRecord) -> Display | None:
        """How the app shows the verdict; None: not at all (a pass with nothing to say)."""
        if v.action == PASS:
            return None
        if v.action == SUSPEND:
            return suspension_banner(v)
        return Display("line", title=f"{v.guard} · {v.action}", text=v.reason)

    @classmethod
    def prune_label(cls, v: VerdictRecord, *, kept: bool) -> tuple[str, str]:
        """(label, details) for a part of the context this guard pruned (``kept``: a prune that kept
        segments, else a truncation)."""
        return v.guard, ""

    @classmethod
    def metrics(cls, run: RunRecord) -> dict[str, Any]:
        """This guard's numbers for one finished run (the same keys whether it was on or off)."""
        return {}

    @classmethod
    def run_budget(cls, settings: Any) -> dict[str, float]:
        """The run budgets this guard needs to act with ``settings`` (its Settings instance): the
        least value of each budget it needs (a ``tuiagent.protocol.BUDGETS`` name: max_tool_calls,
        max_tokens, ...). When the guard is on at the start of a run, the loop raises every budget
        the user did not set to at least this (``tuiagent.protocol.with_guard_needs``). Empty: the
        default budgets suffice."""
        return {}


def suspension_banner(v: VerdictRecord, label: str = "") -> Display:
    """The banner of a ``suspend`` verdict: for how long, and the turn the tool comes back at
    (``tuiagent.protocol.tools_return_turn``); ``label`` names the rule ("RTTS: ")."""
    back = tools_return_turn(v.turn, v.data)
    if back is None:
        return Display(
            "banner",
            title=f"⚠ {label}the tool is suspended from here on",
            sticky=True,
            text=f"{v.reason}. Code blocks are no longer run; the model continues by hand.",
        )
    span = back - v.turn - 1
    return Display(
        "banner",
        title=f"⚠ {label}the tool is suspended for {span} turn{'s' * (span != 1)}, back at turn {back}",
        sticky=True,
        text=f"{v.reason}. Code blocks are not run until then; the model continues by hand.",
    )


class SettingsError(ValueError):
    """A guard setting with a bad name or value; the message says which and what is allowed."""


def _coerce(name: str, tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise SettingsError(f"{name} must be one of {list(typing.get_args(tp))}, not {value!r}")
        return value
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() == "none"):
            return None
        return _coerce(name, args[0], value)
    if tp is bool:
        if isinstance(value, str):
            if value.lower() in ("true", "on", "yes", "1"):
                return True
            if value.lower() in ("false", "off", "no", "0"):
                return False
        if isinstance(value, bool):
            return value
        raise SettingsError(f"{name} must be true or false, not {value!r}")
    if tp in (int, float):
        try:
            number = tp(value)
        except (TypeError, ValueError):
            raise SettingsError(f"{name} must be a number ({tp.__name__}), not {value!r}") from None
        if tp is int and isinstance(value, float) and not value.is_integer():
            raise SettingsError(f"{name} must be a whole number, not {value!r}")
        return number
    if tp is str:
        return str(value)
    return value


def parse_settings(cls: type, values: dict[str, Any], *, guard: str) -> Any:
    """Build a guard's settings dataclass from loose values (TOML, CLI strings), checking names,
    types and each field's ``metadata["check"]`` (a predicate with ``metadata["allowed"]`` text)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    clean = {}
    for key, value in values.items():
        if key not in fields:
            raise SettingsError(f"{guard} has no setting {key!r}; known: {', '.join(sorted(fields))}")
        v = _coerce(f"{guard}.{key}", hints[key], value)
        check = fields[key].metadata.get("check")
        if check is not None and v is not None and not check(v):
            raise SettingsError(f"{guard}.{key} = {v!r} is out of range: {fields[key].metadata.get('allowed', '')}")
        clean[key] = v
    return dataclasses.replace(cls(), **clean)


def setting(
    default: Any, doc: str, *, check: Callable[[Any], bool] | None = None, allowed: str = "", tag: str = "default"
) -> Any:
    """A documented guard setting. ``tag`` says where the default comes from: "paper", "ref" or ours ("default")."""
    return field(default=default, metadata={"doc": doc, "check": check, "allowed": allowed, "tag": tag})
