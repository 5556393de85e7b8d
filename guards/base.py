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
from collections.abc import Callable
from dataclasses import field
from typing import Any, ClassVar, Protocol

from tuiagent.protocol import Call, RunView, Verdict


class Guard(Protocol):
    """Optional hooks; a guard implements the ones it needs. ``name`` and ``order`` are class attributes.

    ``order``: when several guards act at one point, lower runs first (see guards.chain.ORDER).
    Hooks return a Verdict or None (nothing to say).
    """

    name: ClassVar[str]
    order: ClassVar[int]
    Settings: ClassVar[type]

    def on_start(self, view: RunView) -> Verdict | None: ...

    def on_code(self, code: str, view: RunView) -> Verdict | None: ...

    def on_tool_result(self, call: Call, view: RunView) -> Verdict | None: ...

    def on_answer(self, answer: str, view: RunView) -> Verdict | None: ...

    def on_finish(self, view: RunView) -> Verdict | None: ...


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


def setting(default: Any, doc: str, *, check: Callable[[Any], bool] | None = None, allowed: str = "",
            tag: str = "default") -> Any:
    """A documented guard setting. ``tag`` says where the default comes from: "paper", "ref" or ours ("default")."""
    return field(default=default, metadata={"doc": doc, "check": check, "allowed": allowed, "tag": tag})
