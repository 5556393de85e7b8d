"""The protocol types every layer shares: sampling and tokens, the working context's segments,
the budgets of a run, and what guards see and say (calls, the run view, verdicts).

This is the bottom layer (with ``parsing``, ``errors`` and ``paths``): it imports nothing else of
the project, and core, guards, backends, kernels and the UI all import from it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

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


# ----------------------------------------------------------------------------- a run


@dataclass(frozen=True)
class RunSettings:
    """Budgets and formats of one run. Values marked [ref] follow the ATTC reference loop; the rest are ours."""

    mode: str = "tool"  # "tool" or "cot" (chain of thought: same loop, no tool)
    max_tool_calls: int = 4  # [ref]
    exec_timeout_s: float = 5.0  # [ref]
    output_chars: int = 400  # [ref] first 200 + last 200 characters of the tool output
    max_tokens: int = 3072  # [default] generated tokens over the whole run
    max_wall_s: float = 600.0  # [default]


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

PASS, FLAG, INJECT, PRUNE, RESAMPLE, SUSPEND, SKIP, CONTINUE, COMMIT = (
    "pass", "flag", "inject", "prune", "resample", "suspend", "skip", "continue", "commit",
)


@dataclass(frozen=True)
class Verdict:
    """A guard's decision. ``data`` holds the numbers behind it (shown in the UI, kept in the trajectory).

    ``keep``: segment indices of the working context to keep (prune);
    ``truncate_to``: number of segments to keep before resampling (resample);
    ``text``: what to inject / show instead of a tool output / say on continue or suspend.
    """

    action: str
    guard: str = ""
    reason: str = ""
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)
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
    judge: Callable[..., Awaitable[TokenLP]] | None = None  # async judge(question, max_tokens=3)

    @property
    def tool_calls_left(self) -> int:
        """Calls the budget still allows: executed calls count, skipped ones do not (as in the loop)."""
        return self.max_tool_calls - sum(c.executed for c in self.calls)

    @property
    def successful_calls(self) -> list[Call]:
        return [c for c in self.calls if c.executed and not c.error]
