"""The protocol types every layer shares: sampling and tokens, the working context's segments,
the budgets of a run, and what guards see and say (calls, the run view, verdicts).

This is the bottom layer (with ``parsing``, ``errors`` and ``paths``): it imports nothing else of
the project, and core, guards, backends, kernels and the UI all import from it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from types import TracebackType
from typing import Any, Concatenate, Final, Literal, ParamSpec, get_args

_P = ParamSpec("_P")

# ----------------------------------------------------------------------------- generation


@dataclass(frozen=True)
class Sampling:
    """Sampling settings for one generation. ``max_tokens`` bounds one turn."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    repeat_penalty: float = 1.0
    max_tokens: int = 1024
    seed: int | None = None


@dataclass(frozen=True)
class Token:
    """One sampled token: its text and log-probability under the model (None when unavailable)."""

    text: str
    logprob: float | None = None


# Why a generation ended (``TokenStream.stop_reason``).
StopReason = Literal["stop", "eos", "length", "cancelled"]
STOP_REASONS: tuple[StopReason, ...] = get_args(StopReason)
# Why a turn ended (``TurnEnded.stop``): its generation's stop reason, or the run's time ran out
# ("time"), or the backend failed mid-turn ("backend_crashed", "error").
TurnStop = Literal["stop", "eos", "length", "cancelled", "time", "backend_crashed", "error"]
TURN_STOPS: tuple[TurnStop, ...] = get_args(TurnStop)


# How a generation's prompt met the model's cache (``TokenStream.layout``, ``TurnEnded.layout``):
# llama.cpp's single-sequence engine "fresh" (decoded from the start) or "extend" (continued the
# previous call's cache), its batched engine "batched"; "reused": the eval's memo gave it back.
Layout = Literal["fresh", "extend", "batched", "reused"]

# What a backend guarantees about repeating a run (``Backend.determinism``, recorded per eval result;
# docs/scaling.md): "bit-exact" (same model, build, prompt, settings and seed give the same tokens
# and logprobs whatever runs beside it: the local llama.cpp engines, scripted turns); "per-server"
# (a run's turns all go to one server, at best repeatable on that server's build and hardware;
# across servers not guaranteed); "none" (the engine batches requests together: vLLM in process).
Determinism = Literal["bit-exact", "per-server", "none"]


class TokenStream:
    """The tokens of one generation, and why it ended: what ``Backend.stream`` returns.

    Iterate it (``async for token in stream``) for the sampled tokens. ``stop_reason`` is None
    while tokens flow; once the stream ends it is ``"stop"`` (a stop string, not yielded),
    ``"eos"`` (end of sequence) or ``"length"`` (``max_tokens``), and ``"cancelled"`` when it was
    closed (``aclose()``, leaving ``async with``) or its consumer cancelled before it ended. When
    the backend raised, it stays None: the exception says what happened. Each stream carries its
    own reason, so one backend may serve concurrent streams.

    A backend makes one with ``TokenStream(produce, *args)``: ``produce(stream, *args)`` is an
    async generator that yields the tokens and sets ``stream.stop_reason`` before it returns (a
    producer that returns without setting it ended at end of sequence: ``"eos"``). Nothing runs
    before the first token is asked for; ``aclose()`` closes the generator, so its ``finally``
    blocks (cancelling the request upstream) run at once.
    """

    def __init__(
        self,
        produce: Callable[Concatenate[TokenStream, _P], AsyncGenerator[Token, None]],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ):
        self.stop_reason: StopReason | None = None
        self.token_ids: list[int] | None = None  # every sampled id, once ended (backends that know them)
        self.layout: Layout | None = None  # how the prompt met the cache, once ended
        self._tokens = produce(self, *args, **kwargs)
        self._ended = False

    def __aiter__(self) -> TokenStream:
        return self

    async def __anext__(self) -> Token:
        if self._ended:
            raise StopAsyncIteration
        try:
            return await self._tokens.__anext__()
        except StopAsyncIteration:
            self._ended = True
            if self.stop_reason is None:
                self.stop_reason = "eos"
            raise
        except asyncio.CancelledError:
            self._ended, self.stop_reason = True, "cancelled"
            raise
        except BaseException:
            self._ended, self.stop_reason = True, None
            raise

    async def aclose(self) -> None:
        """Stop generating; ``stop_reason`` is then ``"cancelled"`` (unchanged if the stream had ended)."""
        if not self._ended:
            self._ended, self.stop_reason = True, "cancelled"
        await self._tokens.aclose()

    async def __aenter__(self) -> TokenStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


# ----------------------------------------------------------------------------- a run


TOOLS = ("python", "calculator")  # RunSettings.tool: what the tool prompt offers
FIRST_CALLS = ("free", "required")  # RunSettings.first_call


@dataclass(frozen=True)
class RunSettings:
    """Budgets and formats of one run. Values marked [ref] follow the ATTC reference loop; the rest are ours.

    ``explicit``: the budgets the user set (a CLI flag, a preset, an app field); guards never change
    those. ``raised``: (budget, guard) for each default budget the loop raised to what a guard that
    is on needs to act (``guards.base.GuardBase.run_budget``, see :func:`with_guard_needs`) [ours].
    """

    mode: str = "tool"  # "tool", "cot" (chain of thought: same loop, no tool) or "fcstyle" (the tool prompt, no tool)
    # [ours] the tool the prompt offers: "python" (a Jupyter kernel) or "calculator" (one arithmetic
    # expression, the tool-use-tax paper's GSM8K agent, arXiv 2605.00136 section 3.1)
    tool: str = "python"
    # "required": the first turn starts inside a ```python block, so the run begins with a tool call;
    # the tool-use-tax paper collects its gate's training runs so (arXiv 2605.00136, Appendix I.1:
    # "the interaction is initialized with a required tool-use step"). "free" [ours, the default]:
    # the model decides.
    first_call: str = "free"
    max_tool_calls: int = 4  # [ref]
    exec_timeout_s: float = 5.0  # [ref]
    output_chars: int = 400  # [ref] first 200 + last 200 characters of the tool output
    max_tokens: int = 3072  # [default] generated tokens over the whole run
    # [default] for solve, fork and the app; None: no wall clock, an eval's default (its runs end by
    # tokens, calls and turns, so a result does not depend on the machine's load)
    max_wall_s: float | None = 600.0
    explicit: tuple[str, ...] = ()
    raised: tuple[tuple[str, str], ...] = ()

    def record(self) -> dict[str, Any]:
        """The settings as ``RunStarted`` records them: JSON values only (lists, not tuples), so a
        saved run reads back equal."""
        return {**asdict(self), "explicit": list(self.explicit), "raised": [list(p) for p in self.raised]}

    def __post_init__(self) -> None:
        """Reject budgets no run can keep: not a number, infinite, negative, absurdly large, or a zero
        cell timeout (a zero wall-time budget is a run that ends at once)."""
        for name, top in (
            ("exec_timeout_s", _MAX_SECONDS),
            ("max_wall_s", _MAX_SECONDS),
            ("max_tool_calls", _MAX_COUNT),
            ("max_tokens", _MAX_COUNT),
            ("output_chars", _MAX_COUNT),
        ):
            value, positive = getattr(self, name), name == "exec_timeout_s"
            if value is None and name == "max_wall_s":
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or not (0 < value if positive else 0 <= value)
                or value > top
            ):
                low = "above 0" if positive else "0 or more"
                raise ValueError(f"{name} must be a number {low} and at most {top:g}, not {value!r}")


# The RunSettings fields that are budgets: what a guard may need more of, and a user may set.
BUDGETS = ("max_tool_calls", "max_tokens", "max_wall_s", "exec_timeout_s", "output_chars")


def budget_words(settings: Mapping[str, Any]) -> str:
    """A run's budgets in one line, from its RunSettings as a dict (``RunStarted.settings``):
    ``budget=value`` each, with "(ours: GUARD needs it)" after a budget a guard raised and "(set)"
    after one the user set; the transcript's header and the app's guard panel show this."""
    raised = {budget: guard for budget, guard in settings.get("raised", ())}
    explicit = set(settings.get("explicit", ()))
    words = []
    for budget in BUDGETS:
        if budget in settings:
            note = f" (ours: {raised[budget]} needs it)" if budget in raised else " (set)" if budget in explicit else ""
            value = "none" if settings[budget] is None else f"{settings[budget]:g}"
            words.append(f"{budget}={value}{note}")
    return " ".join(words)


class BudgetError(ValueError):
    """A guard declared a need for something that is not a run budget, or not a number."""


def with_guard_needs(settings: RunSettings, needs: Mapping[str, Mapping[str, float]]) -> RunSettings:
    """``settings`` with each budget the user did not set (``explicit``) raised to the most that
    any guard in ``needs`` (guard name -> {budget: least value}) needs; a raised budget names the
    guard in ``raised``. Budgets are only ever raised, never lowered."""
    values = {b: getattr(settings, b) for b in BUDGETS}
    raised = dict(settings.raised)
    for guard, wants in sorted(needs.items()):
        for budget, least in wants.items():
            if budget not in BUDGETS:
                raise BudgetError(
                    f"guard {guard} declares a need for {budget!r}, which is not a run budget "
                    f"(budgets: {', '.join(BUDGETS)})"
                )
            if not isinstance(least, (int, float)) or isinstance(least, bool):
                raise BudgetError(f"guard {guard} declares {budget} = {least!r}, not a number")
            if budget in settings.explicit or values[budget] is None or least <= values[budget]:
                continue
            values[budget] = math.ceil(least) if isinstance(values[budget], int) else float(least)
            raised[budget] = guard
    return replace(settings, **values, raised=tuple(sorted(raised.items())))


# Ours: a day of wall time, and ten million of anything counted, are beyond any run this app makes.
_MAX_SECONDS = 86_400.0
_MAX_COUNT = 10_000_000


@dataclass(frozen=True)
class Segment:
    """A piece of the working context. Kinds: "prompt" (the rendered chat template), "model"
    (generated prose), "code" (a generated ```python block through its closing fence), "tool" (an
    ```output block), "note" (text the loop or a guard appended to the assistant's turn)."""

    kind: str
    text: str
    turn: int = 0
    call: int | None = None
    source: str = ""


# ----------------------------------------------------------------------------- guards

# What a guard's verdict asks of the loop (``Verdict.action``).
Action = Literal["pass", "flag", "inject", "prune", "resample", "suspend", "skip", "continue", "commit"]
ACTIONS: tuple[Action, ...] = get_args(Action)
PASS: Final = "pass"
FLAG: Final = "flag"
INJECT: Final = "inject"
PRUNE: Final = "prune"
RESAMPLE: Final = "resample"
SUSPEND: Final = "suspend"
SKIP: Final = "skip"
CONTINUE: Final = "continue"
COMMIT: Final = "commit"

# How much a notice matters (``Notice.level``).
NoticeLevel = Literal["info", "warning", "error"]

# How a run ended (``RunFinished.reason``): answer, no_answer, tool_budget, token_budget, turn_length
# (one turn reached the model's ``max_tokens`` per turn with run budget left), time_budget, cancelled,
# error, backend_crashed (the model process died), kernel_failed (the tool kernel would not start).
EndReason = Literal[
    "answer",
    "no_answer",
    "tool_budget",
    "token_budget",
    "turn_length",
    "time_budget",
    "cancelled",
    "error",
    "backend_crashed",
    "kernel_failed",
]
END_REASONS: tuple[EndReason, ...] = get_args(EndReason)
# The ends that are a failure of the program or the machine, not of the model (the CLI exits non-zero).
FAILURE_REASONS: tuple[EndReason, ...] = ("error", "backend_crashed", "kernel_failed")


def tools_return_turn(turn: int, data: Mapping[str, Any]) -> int | None:
    """The turn at whose start the tool comes back after a ``suspend`` verdict given at ``turn``:
    ``data["suspend_turns"]`` (a whole number >= 1) turns run without it, so it is back when turn
    ``turn + suspend_turns + 1`` starts. None: suspended for the rest of the run (no span given, as
    in every suspension recorded before spans existed)."""
    n = data.get("suspend_turns")
    return turn + n + 1 if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else None


@dataclass(frozen=True)
class Verdict:
    """A guard's decision. ``data`` holds the numbers behind it (shown in the UI, kept in the trajectory):
    a plain dict of JSON values, which a guard may describe with a ``TypedDict`` of its own.

    ``keep``: segment indices of the working context to keep (prune);
    ``truncate_to``: number of segments to keep before resampling (resample);
    ``text``: what to inject / show instead of a tool output / say on continue or suspend.
    """

    action: Action
    guard: str = ""
    reason: str = ""
    text: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    keep: tuple[int, ...] | None = None
    truncate_to: int | None = None


@dataclass(frozen=True)
class Call:
    """One tool call as guards see it. ``segment`` is the index of its code segment in the
    working context (None once pruned)."""

    call: int
    turn: int
    code: str
    output: str
    error: bool
    timed_out: bool
    executed: bool = True
    segment: int | None = None


@dataclass(frozen=True)
class TokenLP:
    text: str
    logprob: float | None


@dataclass(frozen=True)
class JudgeReply:
    """A judge model's reply to a guard's question: its text, every sampled token with its
    log-probability (the text is their concatenation), and the id of the model that answered."""

    text: str
    tokens: tuple[TokenLP, ...] = ()
    model: str = ""

    @property
    def logprob(self) -> float | None:
        """The first token's log-probability."""
        return self.tokens[0].logprob if self.tokens else None


@dataclass
class RunView:
    """What the loop shows guards. Read-only by convention; rebuilt cheaply at each decision point."""

    problem: str
    mode: str
    turn: int
    turn_text: str
    turn_tokens: Sequence[TokenLP]
    calls: Sequence[Call]
    segments: Sequence[Segment]
    max_tool_calls: int
    tools_suspended: bool
    answer: str | None = None
    answer_attempts: int = 0
    # async judge(question, max_tokens=3, model=None) -> JudgeReply: ask the model under test, or the
    # models.toml entry ``model``, a question in a fresh chat
    judge: Callable[..., Awaitable[JudgeReply]] | None = None
    trajectory: Sequence[RunPiece] = ()  # the whole run so far, pruned parts included (RunRecord.pieces)

    @property
    def tool_calls_left(self) -> int:
        """Calls the budget still allows: executed calls count, skipped ones do not (as in the loop)."""
        return self.max_tool_calls - sum(c.executed for c in self.calls)

    @property
    def successful_calls(self) -> list[Call]:
        return [c for c in self.calls if c.executed and not c.error]


# ----------------------------------------------------------------------------- how guards read and show
# A guard describes its own verdicts with these (see guards.base.GuardBase): renderers, replay,
# compare and the eval read them and never need to know a guard by name.


@dataclass(frozen=True)
class VerdictRecord:
    """A verdict as the trajectory holds it (a GuardVerdict event's fields)."""

    guard: str
    hook: str
    action: Action
    reason: str = ""
    text: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    turn: int = 0


@dataclass(frozen=True)
class Span:
    """A piece of styled text. ``style``: space-separated words from bold, italic, muted, ok, warn,
    error, accent (the app maps them to its theme)."""

    text: str
    style: str = ""


@dataclass(frozen=True)
class Gauge:
    """A number drawn as a bar over [lo, hi] (``log``: a log10 scale) with ``mark`` (a threshold)
    marked; drawn in ``above``'s style when value >= mark, else ``below``'s."""

    value: float | None
    mark: float | None = None
    lo: float = 0.0
    hi: float = 1.0
    log: bool = False
    above: str = "ok"
    below: str = "warn"
    width: int = 16


Line = tuple[Span | Gauge, ...]


@dataclass(frozen=True)
class Display:
    """How the app shows one verdict.

    ``place``: "code" (lines under the code block it judged: ``call``, or the latest one),
    "code-status" (spans at the end of that block's status line), "code-skip" (the reason that
    block was not run), "card" (a card in the turn), "banner" (a sticky banner), "line" (a note
    line). ``attempt``: a card about an answer attempt (the app adds the attempted answer and
    whether it was final). ``flagged``: a card that warns. ``sticky``: stays in view.
    """

    place: str
    lines: tuple[Line, ...] = ()
    title: str = ""
    text: str = ""
    call: int | None = None
    attempt: bool = False
    flagged: bool = False
    sticky: bool = False
    tooltip: str = ""


@dataclass(frozen=True)
class RunPiece:
    """One piece of a finished run, in order: "turn" (generated text), "code" (a code block;
    ``executed`` false when it was not run), "output" (an executed tool output; ``error`` when
    the call raised or timed out)."""

    kind: str
    text: str
    executed: bool = True
    error: bool = False


@dataclass(frozen=True)
class RunRecord:
    """A finished run as guards' metrics read it (every verdict, of every guard)."""

    pieces: tuple[RunPiece, ...]
    verdicts: tuple[VerdictRecord, ...]
    answer: str | None
    gold: str | None
    correct: bool | None
    problem: str = ""  # the question as the model was given it

    def of(self, guard: str) -> list[VerdictRecord]:
        return [v for v in self.verdicts if v.guard == guard]
