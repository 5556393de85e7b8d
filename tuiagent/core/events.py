"""Everything that happens in a run, as frozen dataclasses with a versioned JSON form.

The trajectory file is these events, one JSON object a line, in order. Views
(steps, the working context, summaries) are folded from them, never stored twice.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tuiagent.protocol import FAILURE_REASONS as FAILURE_REASONS  # defined with the other closed sets
from tuiagent.protocol import Action, EndReason, Layout, NoticeLevel, TurnStop, VerdictRecord

SCHEMA = "tuiagent.trajectory"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Event:
    """Base of all events; ``t`` is wall-clock seconds since the epoch."""

    t: float = field(default_factory=time.time, kw_only=True)
    type: ClassVar[str] = "Event"


@dataclass(frozen=True)
class RunStarted(Event):
    """A run began. ``prompt`` is the rendered working context before the first turn."""

    run_id: str
    problem: str
    model_id: str
    backend: str
    mode: str  # "tool" or "cot"
    prompt: str
    sampling: dict[str, Any]
    settings: dict[str, Any]
    gold: str | None = None
    parent: dict[str, Any] | None = None  # a fork's parent: run_id, trajectory, step (tuiagent.core.fork)
    type: ClassVar[str] = "RunStarted"


@dataclass(frozen=True)
class TurnStarted(Event):
    """The model starts generating turn ``turn`` over ``context_tokens`` tokens."""

    turn: int
    context_tokens: int
    type: ClassVar[str] = "TurnStarted"


@dataclass(frozen=True)
class TokenDelta(Event):
    """One piece of generated text with the sampled token's log-probability (None if unknown)."""

    turn: int
    text: str
    logprob: float | None = None
    type: ClassVar[str] = "TokenDelta"


@dataclass(frozen=True)
class TurnEnded(Event):
    """A turn ended. ``stop`` is "stop" (at the output fence), "eos", "length" or "cancelled", "time"
    (the run's time budget ran out), "backend_crashed" or "error" (``tuiagent.protocol.TurnStop``).
    ``token_ids`` (every sampled id) and ``layout`` (how the prompt met the model's cache) come
    from backends that know them; a fork uses them to rebuild the model's state exactly.
    ``prose_end``: the turn's prose is ``text[:prose_end]``, the code block that asks for a tool
    call the rest (none when it is ``len(text)``); None only in a turn recorded before the field
    was, which ``trajectory.load`` fills in (``core.context.turn_prose_end``)."""

    turn: int
    text: str
    stop: TurnStop
    tokens: int
    token_ids: list[int] | None = None
    layout: Layout | None = None
    prose_end: int | None = None
    type: ClassVar[str] = "TurnEnded"


@dataclass(frozen=True)
class CodeBlock(Event):
    """A closed ```python block; ``call`` numbers the code blocks of the run from 1 (executed or not)."""

    turn: int
    call: int
    code: str
    type: ClassVar[str] = "CodeBlock"


@dataclass(frozen=True)
class ToolResult(Event):
    """The kernel's answer to call ``call``. ``shown`` is the text the model gets back."""

    call: int
    shown: str
    error: bool
    timed_out: bool
    duration_s: float
    outputs: list[dict[str, Any]]
    restarted: bool = False
    died: bool = False
    error_name: str | None = None
    executed: bool = True
    type: ClassVar[str] = "ToolResult"


@dataclass(frozen=True)
class ContextAppended(Event):
    """Text the loop added to the working context on the model's side: a tool output ("tool"
    segment) or a note from the loop ("budget") or a guard (its name)."""

    text: str
    source: str
    kind: str = "note"
    call: int | None = None  # the tool call a "tool" segment answers
    type: ClassVar[str] = "ContextAppended"


@dataclass(frozen=True)
class AnswerAttempt(Event):
    """The model wrote a boxed answer; ``final`` is true when the run ends with it."""

    turn: int
    answer: str
    final: bool
    type: ClassVar[str] = "AnswerAttempt"


@dataclass(frozen=True)
class Notice(Event):
    """Something a person should see: a kernel restart, a budget reached, a backend error."""

    level: NoticeLevel
    message: str
    type: ClassVar[str] = "Notice"


@dataclass(frozen=True)
class GuardVerdict(Event):
    """A guard's decision at a hook, with the numbers behind it."""

    hook: str
    guard: str
    action: Action
    reason: str = ""
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    turn: int = 0
    type: ClassVar[str] = "GuardVerdict"

    def record(self) -> VerdictRecord:
        """The verdict as guards describe it (``guards.chain.presenter(guard)``)."""
        return VerdictRecord(self.guard, self.hook, self.action, self.reason, self.text, self.data or {}, self.turn)


@dataclass(frozen=True)
class GuardToggled(Event):
    """A guard was switched on or off (or its settings changed), at start or during the run."""

    guard: str
    enabled: bool
    settings: dict[str, Any]
    reason: str = ""
    type: ClassVar[str] = "GuardToggled"


@dataclass(frozen=True)
class ContextPruned(Event):
    """The working context lost segments. ``keep``: the segment indices kept (prune), or
    ``truncate_to``: the number of segments kept before a resample."""

    guard: str
    keep: list[int] | None = None
    truncate_to: int | None = None
    removed_text: str = ""
    type: ClassVar[str] = "ContextPruned"


@dataclass(frozen=True)
class Intervention(Event):
    """Something put into the run in place of what the run itself produced, by a person (an edit
    that a fork continues from, a fault armed in the app) or by a protocol (``eval --inject``).

    ``target``: what was replaced: "output" (a tool output; the kernel keeps the state the
    original code left), "code" (a code block, run for real in its place) or "text" (the model's
    text of turn ``turn``, kept to ``token`` tokens, then ``replacement`` appended). ``fault``: the
    kind of an injected fault ("wrong-number", "error", "empty", "timeout", "stale"), None for an
    edit. ``replaced`` keeps what was there, ``replacement`` what the model reads instead;
    ``detail`` says how a fault was made (its rule, the value changed, the seed)."""

    target: str
    by: str  # "person" or "protocol"
    turn: int
    replaced: str
    replacement: str
    call: int | None = None
    token: int | None = None
    fault: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    type: ClassVar[str] = "Intervention"


@dataclass(frozen=True)
class RunFinished(Event):
    """The run ended. ``reason``: answer, no_answer, tool_budget, token_budget, turn_length (one turn
    reached the model's ``max_tokens`` per turn with run budget left), time_budget, cancelled, error,
    backend_crashed (the model process died; a Notice before this event says how), kernel_failed (the
    tool kernel would not start, or start again after a restart; a Notice before this event says why)."""

    reason: EndReason
    answer: str | None
    correct: bool | None
    tool_calls: int
    erroneous_calls: int
    generated_tokens: int
    context_tokens: int
    wall_s: float
    trajectory: str | None = None
    type: ClassVar[str] = "RunFinished"


EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        RunStarted,
        TurnStarted,
        TokenDelta,
        TurnEnded,
        CodeBlock,
        ToolResult,
        ContextAppended,
        AnswerAttempt,
        Notice,
        GuardVerdict,
        GuardToggled,
        ContextPruned,
        Intervention,
        RunFinished,
    )
}


def register_event(cls: type[Event]) -> type[Event]:
    """Make an event class (a guard's, for instance) loadable from trajectories."""
    EVENT_TYPES[cls.type] = cls
    return cls


def to_dict(event: Event) -> dict[str, Any]:
    data = {"type": event.type}
    data.update(dataclasses.asdict(event))
    return data


def from_dict(data: Any) -> Event:
    """Rebuild an event; unknown fields (from a newer writer) are ignored.

    Anything else that does not fit (not an object, an unknown type, a missing or mistyped field)
    raises ValueError: an event read back always has the types its class declares, so the views
    folded from a hand-edited trajectory can trust them.
    """
    if not isinstance(data, dict):
        raise ValueError(f"not an event object but {type(data).__name__}")
    name = data.get("type")
    cls = EVENT_TYPES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"unknown event type {name!r}")
    declared = _field_types(cls)  # type: ignore[arg-type]  # a class is hashable; mypy#11470 says not
    values = {k: v for k, v in data.items() if k in declared}
    missing = [
        f.name
        for f in dataclasses.fields(cls)
        if f.name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"{cls.type} without {', '.join(missing)}")
    for key, value in values.items():
        if not _fits(value, declared[key]):
            raise ValueError(f"{cls.type}.{key} should be {_type_name(declared[key])}, not {type(value).__name__}")
    return cls(**values)


@functools.cache
def _field_types(cls: type[Event]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value has the declared type (an int is a float, a bool is not an int)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin is typing.Literal:  # a closed set (action, end or stop reason) reads as its plain type, as before
        return isinstance(value, tuple({type(a) for a in args}))
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if origin is list:
        return isinstance(value, list) and all(_fits(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_fits(v, args[1]) for v in value.values())
    if isinstance(value, bool) and hint is not bool:
        return False
    if hint is float:
        return isinstance(value, (int, float))
    return isinstance(value, origin or hint)


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is typing.Literal:
        return "str"
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")
