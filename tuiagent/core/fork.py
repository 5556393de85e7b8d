"""Forking a recorded run: a new run that starts from the parent's working context at a step and
goes on under other settings.

A fork copies the parent's events up to the cut (the start of turn ``step + 1``), then rebuilds
what the text alone does not hold: the model's state (the recorded turns decoded again with their
token ids, ``ExactReplay``, so the parent's settings repeat its next turn bit for bit) and the
kernel's (the executed cells run again); each check is a Notice. Why and how: docs/runs.md#forking-a-run.

An edit is a fork point plus a replacement (``edit_point``): a step's tool output, its code block,
or its text from a token on; the fork records it as an ``Intervention`` and goes on from exactly
there (docs/runs.md#editing-and-continuing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuiagent.backends.base import Backend, ExactReplay
from tuiagent.core import events as ev
from tuiagent.core import prompts
from tuiagent.core.context import WorkingContext
from tuiagent.errors import UserError
from tuiagent.protocol import Layout

PREVIEW_CHARS = 60  # [ours] how much of a mismatching output a notice quotes
FORK_MARK = "forked from run"  # the Notice after the prefix: the fork's own events follow it


def fork_notice(point: ForkPoint) -> ev.Notice:
    if point.edit is not None:
        where = f"at token {point.edit.token} of" if point.edit.target == "text" else "at"
        return ev.Notice(
            level="info",
            message=f"{FORK_MARK} {point.parent_run_id} {where} step {point.step}, its {point.edit.what} edited",
        )
    return ev.Notice(level="info", message=f"{FORK_MARK} {point.parent_run_id} after step {point.step}")


def is_fork_mark(e: ev.Event) -> bool:
    """Whether ``e`` is where a fork's own events begin (what came before is its parent's)."""
    return isinstance(e, ev.Notice) and e.message.startswith(FORK_MARK)


class ForkError(UserError):
    """A run that cannot be forked (or edited) at the step asked for: one line, then the fix. Exit code 2."""

    exit_code = 2

    def __init__(self, problem: str, *, fix: str | None = None):
        self.problem, self.fix = problem, fix
        super().__init__(problem + (f"\n  fix: {fix}" if fix else ""))


@dataclass(frozen=True)
class ModelTurn:
    """One recorded generation to decode again: its prompt, sampled ids, layout and streamed tokens."""

    turn: int
    prompt: str
    token_ids: tuple[int, ...]
    layout: Layout
    tokens: tuple[tuple[str, float | None], ...]


@dataclass(frozen=True)
class Cell:
    """An executed cell of the prefix and the output the kernel gave it (what the model was shown,
    unless an edit or an injected fault replaced that: then what was replaced first)."""

    call: int
    code: str
    shown: str


EDIT_TARGETS = ("output", "code", "text")


@dataclass(frozen=True)
class Edit:
    """What an edit fork puts in place of what the parent had, and what the loop needs to go on.

    ``output``: the tool output of call ``call`` (``result``: the parent's ToolResult; the kernel
    re-runs the original cell, so its state is what the original code left). ``code``: the code
    block of call ``call`` (``turn_end``: the parent's TurnEnded, whose text gets the new code; the
    kernel is rebuilt by the cells before it, then the new code runs). ``text``: turn ``turn`` kept
    to its first ``token`` tokens (``kept``, with their ids ``kept_ids`` when recorded), then
    ``replacement``, then the model goes on generating that turn."""

    target: str
    turn: int
    replaced: str
    replacement: str
    call: int | None = None
    token: int | None = None
    result: ev.ToolResult | None = None
    turn_end: ev.TurnEnded | None = None
    kept: tuple[tuple[str, float | None], ...] = ()
    kept_ids: tuple[int, ...] | None = None

    @property
    def what(self) -> str:
        """The edited item in words: "output of call 2", "code of call 2", "text"."""
        return f"{self.target} of call {self.call}" if self.call is not None else self.target

    def event(self, by: str = "person") -> ev.Intervention:
        return ev.Intervention(
            target=self.target,
            by=by,
            turn=self.turn,
            replaced=self.replaced,
            replacement=self.replacement,
            call=self.call,
            token=self.token,
        )

    def turn_text(self) -> str:
        """``code``: the turn's text with the new code in place of the old."""
        assert self.turn_end is not None
        text = self.turn_end.text
        start = text.rfind(self.replaced, self.turn_end.prose_end or 0)
        if start < 0:
            start = text.rfind(self.replaced)
        return text[:start] + self.replacement + text[start + len(self.replaced) :]


@dataclass(frozen=True)
class ForkPoint:
    """Where a fork starts: the parent's events before the cut, and what rebuilding needs."""

    parent_run_id: str
    parent_path: str | None
    step: int
    started: ev.RunStarted
    prefix: tuple[ev.Event, ...]  # after RunStarted, up to the cut
    chain: tuple[ModelTurn, ...] | None  # None: the record cannot rebuild the model state (``inexact`` says why)
    inexact: str
    next_layout: Layout | None  # how the parent's turn after the cut met the cache, if it had one
    cells: tuple[Cell, ...]
    edit: Edit | None = None  # an edit fork: what it replaces (``edit_point``)

    @property
    def parent(self) -> dict[str, Any]:
        """What the fork's RunStarted records about its parent (and the edit it starts with)."""
        parent: dict[str, Any] = {"run_id": self.parent_run_id, "trajectory": self.parent_path, "step": self.step}
        if self.edit is not None:
            parent["edit"] = self.edit.target
        return parent

    @property
    def elapsed_s(self) -> float:
        """The parent's wall time up to the cut (the fork's time budget counts it)."""
        last = self.prefix[-1].t if self.prefix else self.started.t
        return max(0.0, last - self.started.t)


def fork_point(events: Sequence[ev.Event], step: int, path: str | Path | None = None) -> ForkPoint:
    """The fork of ``events`` (a recorded run) after its step ``step`` (0: before the first turn)."""
    started = _run_start(events, path)
    turn_starts = [i for i, e in enumerate(events) if isinstance(e, ev.TurnStarted)]
    if not 0 <= step < len(turn_starts):
        turns = len(turn_starts)
        steps = f"steps 0 to {turns - 1}" if turns > 1 else "step 0" if turns else "no step"
        raise ForkError(
            f"step {step} is not a step this run can be forked at: it has {turns} "
            f"turn{'s' * (turns != 1)}, so {steps} (a fork generates the turn after its step)"
        )
    cut = turn_starts[step]
    prefix = tuple(events[1:cut])
    nxt = next((e for e in events[cut:] if isinstance(e, ev.TurnEnded)), None)
    return _point(started, step, prefix, path, _layout(nxt), _cells(prefix))


def _run_start(events: Sequence[ev.Event], path: str | Path | None) -> ev.RunStarted:
    first = events[0] if events else None
    if not isinstance(first, ev.RunStarted):
        raise ForkError(f"{path or 'the run'} has no start (RunStarted): there is nothing to fork")
    return first


def _point(
    started: ev.RunStarted,
    step: int,
    prefix: tuple[ev.Event, ...],
    path: str | Path | None,
    next_layout: Layout | None,
    cells: tuple[Cell, ...],
    edit: Edit | None = None,
) -> ForkPoint:
    """The ForkPoint of a prefix: with the model turns to decode again, or why the record cannot give them."""
    chain, inexact = _model_chain(started, prefix)
    return ForkPoint(
        parent_run_id=started.run_id,
        parent_path=str(path) if path is not None else None,
        step=step,
        started=started,
        prefix=prefix,
        chain=chain,
        inexact=inexact,
        next_layout=next_layout,
        cells=cells,
        edit=edit,
    )


def edit_point(
    events: Sequence[ev.Event],
    step: int,
    target: str,
    replacement: str,
    *,
    token: int | None = None,
    path: str | Path | None = None,
) -> ForkPoint:
    """The fork of ``events`` that replaces step ``step``'s ``target`` ("output", "code" or
    "text") with ``replacement`` and goes on from there (``token``: for "text", how many of the
    turn's tokens to keep). Steps, calls and tokens are numbered as ``replay`` and ``runs show``
    show them: step N is turn N, tokens count from 0."""
    if target not in EDIT_TARGETS:
        raise ForkError(f"{target!r} is not something a fork can edit: {', '.join(EDIT_TARGETS)}")
    started = _run_start(events, path)
    starts = {e.turn: i for i, e in enumerate(events) if isinstance(e, ev.TurnStarted)}
    if step not in starts:
        turns = len(starts)
        which = f"steps 1 to {turns}" if turns > 1 else "step 1" if turns else "no step"
        raise ForkError(
            f"step {step} is not a step of this run: it has {turns} turn{'s' * (turns != 1)}, so {which}",
            fix="`tuiagent runs show RUN` numbers its steps",
        )
    begin = starts[step]
    end = min((i for t, i in starts.items() if t > step), default=len(events))
    turn = events[begin:end]
    ended = next((e for e in turn if isinstance(e, ev.TurnEnded)), None)
    block = next((e for e in turn if isinstance(e, ev.CodeBlock)), None)
    result = next(
        (e for e in turn if isinstance(e, ev.ToolResult) and block is not None and e.call == block.call), None
    )
    nxt = next((e for e in events[end:] if isinstance(e, ev.TurnEnded)), None)
    show = "`tuiagent runs show RUN` shows each step's code and output"
    edit: Edit
    if target == "output":
        if block is None or result is None:
            raise ForkError(f"step {step} has no tool output to replace: its turn asked for no tool call", fix=show)
        cut = events.index(result)
        edit = Edit("output", step, result.shown, replacement, call=block.call, result=result)
        prefix, cells, next_layout = tuple(events[1:cut]), _cells([*events[1:cut], result]), _layout(nxt)
    elif target == "code":
        if block is None or ended is None:
            raise ForkError(f"step {step} has no code block to replace", fix=show)
        cut = events.index(ended)
        edit = Edit("code", step, block.code, replacement, call=block.call, turn_end=ended)
        prefix, next_layout = tuple(events[1:cut]), _layout(nxt)
        cells = _cells(prefix)
    else:
        if ended is None:
            raise ForkError(f"step {step}'s turn did not end in the record: there is no text to keep")
        tokens = tuple((e.text, e.logprob) for e in turn if isinstance(e, ev.TokenDelta))
        if token is None or not 0 <= token <= len(tokens):
            raise ForkError(
                f"token {token} is not in step {step}: its turn has {len(tokens)} tokens",
                fix=f"keep 0 to {len(tokens)} tokens (--at-token {len(tokens)} keeps the whole turn)",
            )
        ids = tuple(ended.token_ids[:token]) if ended.token_ids is not None else None
        edit = Edit(
            "text",
            step,
            "".join(t for t, _ in tokens[token:]),
            replacement,
            token=token,
            kept=tokens[:token],
            kept_ids=ids if ids is not None and len(ids) == token else None,
        )
        prefix, next_layout = tuple(events[1:begin]), ended.layout
        cells = _cells(prefix)
    return _point(started, step, prefix, path, next_layout, cells, edit)


@dataclass(frozen=True)
class EditTarget:
    """What replay's edit key edits at an event: step ``step``'s ``target`` ("output", "code" or
    "text"), with what is there now (``current``); for text, the turn's tokens as generated (an edit
    keeps those it leaves in place: ``text_edit``)."""

    step: int
    target: str
    current: str
    tokens: tuple[str, ...] = ()


def edit_target(events: Sequence[ev.Event], position: int) -> EditTarget | None:
    """The item of a recorded run in view after ``position`` events (the current event is
    ``events[position - 1]``): a tool output, a code block (also at the end of a turn with code), or
    the turn's text (at its start, at a token, or at the end of a turn without code); a verdict or
    a note edits the nearest of those before it in the same step. None before the first turn."""
    shown = list(events[: max(position, 0)])
    start = next((i for i in range(len(shown) - 1, -1, -1) if isinstance(shown[i], ev.TurnStarted)), None)
    if start is None:
        return None
    started = shown[start]
    assert isinstance(started, ev.TurnStarted)
    turn = list(events[start:])
    turn = turn[: next((i for i, e in enumerate(turn) if i and isinstance(e, ev.TurnStarted)), len(turn))]
    block = next((e for e in turn if isinstance(e, ev.CodeBlock)), None)
    for e in reversed(shown[start:]):
        if isinstance(e, ev.ToolResult) and e.executed:
            return EditTarget(started.turn, "output", e.shown)
        if isinstance(e, ev.CodeBlock) or (isinstance(e, ev.TurnEnded) and block is not None):
            assert block is not None
            return EditTarget(started.turn, "code", block.code)
        if isinstance(e, (ev.TokenDelta, ev.TurnEnded, ev.TurnStarted)):
            tokens = tuple(x.text for x in turn if isinstance(x, ev.TokenDelta))
            return EditTarget(started.turn, "text", "".join(tokens), tokens)
    return None


def text_edit(tokens: Sequence[str], edited: str) -> tuple[int, str]:
    """A turn's text as edited, as a text fork takes it: (how many of the turn's ``tokens`` stay, as
    generated, at its start; the text after them, which the model reads as its own and goes on from)."""
    kept, at = 0, 0
    for token in tokens:
        if not edited.startswith(token, at):
            break
        kept, at = kept + 1, at + len(token)
    return kept, edited[at:]


def _layout(ended: ev.TurnEnded | None) -> Layout | None:
    return ended.layout if ended is not None else None


def guards_at(point: ForkPoint) -> tuple[tuple[str, ...], dict[str, dict[str, Any]]]:
    """The guards on at the fork point and the settings each was last given (what the parent ran with)."""
    on: dict[str, bool] = {}
    settings: dict[str, dict[str, Any]] = {}
    for e in point.prefix:
        if isinstance(e, ev.GuardToggled):
            on[e.guard] = e.enabled
            settings[e.guard] = dict(e.settings)
    names = tuple(sorted(g for g, enabled in on.items() if enabled))
    return names, {g: settings[g] for g in names}


def _model_chain(started: ev.RunStarted, prefix: Sequence[ev.Event]) -> tuple[tuple[ModelTurn, ...] | None, str]:
    """The turns to decode again: from the last fresh one to the cut (or why the record cannot say)."""
    context = WorkingContext(started.prompt, started.mode)
    turns: list[ModelTurn] = []
    prompt = ""
    tokens: list[tuple[str, float | None]] = []
    for e in prefix:
        if isinstance(e, ev.TurnStarted):
            prompt, tokens = context.text, []
        elif isinstance(e, ev.TokenDelta):
            tokens.append((e.text, e.logprob))
        elif isinstance(e, ev.TurnEnded):
            if e.token_ids is None or e.layout is None:
                return None, (
                    f"turn {e.turn} was recorded without its token ids (a backend that does not give "
                    "them, or an older tuiagent)"
                )
            if e.layout not in ("fresh", "extend"):
                return None, (
                    f"turn {e.turn} came from llama.cpp's batched engine (an eval), whose numbers the "
                    "single-sequence engine does not reproduce"
                )
            if e.layout == "fresh":
                turns = []
            turns.append(ModelTurn(e.turn, prompt, tuple(e.token_ids), e.layout, tuple(tokens)))
        context.apply(e)
    return tuple(turns), ""


def _cells(prefix: Sequence[ev.Event]) -> tuple[Cell, ...]:
    code = {e.call: e.code for e in prefix if isinstance(e, ev.CodeBlock)}
    printed: dict[int, str] = {}  # a replaced output: the kernel's own, which the rebuilt kernel gives again
    for e in prefix:
        if isinstance(e, ev.Intervention) and e.target == "output" and e.call is not None:
            printed.setdefault(e.call, e.replaced)
    return tuple(
        Cell(e.call, code.get(e.call, ""), printed.get(e.call, e.shown))
        for e in prefix
        if isinstance(e, ev.ToolResult) and e.executed and e.call in code
    )


async def restore_model(backend: Backend, point: ForkPoint, stop: Sequence[str]) -> ev.Notice:
    """Bring ``backend`` to the parent's model state at the cut and say how exactly it matched."""
    if point.started.model_id != backend.model_id:
        return ev.Notice(
            level="warning",
            message=(
                f"the fork runs on {backend.model_id}, the parent ran on {point.started.model_id}: "
                "it continues from the parent's text, not its model state"
            ),
        )
    if not isinstance(backend, ExactReplay):
        return ev.Notice(
            level="info",
            message=(
                f"{type(backend).__name__} cannot replay a recorded turn: the fork continues from the parent's text "
                "(its first turn is not guaranteed to repeat the parent's numbers)"
            ),
        )
    if point.chain is None:
        backend.fresh()
        return ev.Notice(level="warning", message=f"model state not rebuilt: {point.inexact}; the fork starts fresh")
    backend.fresh()  # the chain starts where the parent's layout was fresh
    tokens = 0
    for turn in point.chain:
        async with backend.replay(turn.prompt, turn.token_ids, stop) as stream:
            got = [(t.text, t.logprob) async for t in stream]
        tokens += len(turn.token_ids)
        where = _first_difference(got, turn.tokens)
        if stream.layout != turn.layout or where is not None:
            detail = (
                f"its layout was {stream.layout}, recorded {turn.layout}" if stream.layout != turn.layout else where
            )
            return ev.Notice(
                level="warning",
                message=(
                    f"model state differs from the record at turn {turn.turn}: {detail}; "
                    "the fork's tokens may differ from the parent's for reasons other than its settings"
                ),
            )
    if point.next_layout == "fresh":
        backend.fresh()
    turns = len(point.chain)
    return ev.Notice(
        level="info",
        message=(
            f"model state rebuilt exactly: {turns} turn{'s' * (turns != 1)} ({tokens} tokens) decoded again, "
            "every token and logprob as recorded"
            if turns
            else "model state: nothing to rebuild before the first turn"
        ),
    )


def _first_difference(
    got: Sequence[tuple[str, float | None]], recorded: Sequence[tuple[str, float | None]]
) -> str | None:
    for i, (a, b) in enumerate(zip(got, recorded)):
        if a[0] != b[0]:
            return f"token {i + 1} is {a[0]!r}, recorded {b[0]!r}"
        if not _same(a[1], b[1]):
            return f"token {i + 1} ({a[0]!r}) has logprob {a[1]}, recorded {b[1]}"
    if len(got) != len(recorded):
        return f"{len(got)} tokens, recorded {len(recorded)}"
    return None


def _same(a: float | None, b: float | None) -> bool:
    """Logprobs equal as recorded: JSON round-trips floats exactly, so equal means bit-equal."""
    if a is None or b is None:
        return a is b
    return a == b or (math.isnan(a) and math.isnan(b))


async def restore_kernel(kernel: Any, cells: Sequence[Cell], timeout_s: float, output_chars: int) -> ev.Notice | None:
    """Run the prefix's executed cells again in ``kernel``; a Notice says whether outputs matched."""
    if kernel is None or not cells:
        return None
    differ = []
    for cell in cells:
        result = await kernel.execute(cell.code, timeout_s)
        shown = prompts.truncate_middle(result.text, output_chars)
        if shown != cell.shown:
            differ.append(f"cell {cell.call} gave {_preview(shown)}, recorded {_preview(cell.shown)}")
    n = len(cells)
    if not differ:
        return ev.Notice(
            level="info",
            message=(
                f"kernel state rebuilt: {n} cell{'s' * (n != 1)} of the parent run again, every output as recorded"
            ),
        )
    outputs = "1 output differs" if len(differ) == 1 else f"{len(differ)} outputs differ"
    return ev.Notice(
        level="warning",
        message=(f"kernel state rebuilt from {n} cell{'s' * (n != 1)}, but {outputs}: " + "; ".join(differ)),
    )


def _preview(text: str) -> str:
    text = text.strip()
    return repr(text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…")
