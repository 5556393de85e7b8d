"""One saved run as an inspect_ai sample (``EvalSample``), through inspect_ai's own classes:
messages, transcript, score, metadata, usage and limit (``tuiagent.export.inspect_log`` makes the logs).

Its messages are the whole run as it entered the model's context, pruned
parts kept and marked (``metadata.pruned_by``: which guard and why; ``metadata.pruned``: the parts
that left): the system prompt and the problem, each turn's prose as an assistant message whose
code block is a call of a ``python`` tool (the fenced block the model wrote is the call's view),
the output the model read as the tool's message (the viewer draws it under the call; the fenced
block as it entered the context is its ``metadata.context_text``), and each note the loop or a
guard appended as a user message (tuiagent writes notes into the assistant's turn; inspect has no
such shape, and a note is not the model's). Its transcript (inspect's events) has one model call
per turn whose input is the working context the model was given at that turn, after prunes
(joined, a tool call by its view and a tool's output by its context text, the texts after the
opening are that context character for character), a tool event per call, and an info event per
guard verdict, prune, toggle and notice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuiagent.core import events as ev
from tuiagent.core import prompts
from tuiagent.core.compare import PruneMark, intervention_label, pruned_parts, summary, verdict_note
from tuiagent.core.context import WorkingContext
from tuiagent.core.fork import is_fork_mark
from tuiagent.core.steps import run_metrics
from tuiagent.errors import UserError
from tuiagent.protocol import Segment

if TYPE_CHECKING:
    from inspect_ai.event import Event as InspectEvent
    from inspect_ai.log import EvalSample
    from inspect_ai.model import ChatMessage, GenerateConfig, ModelOutput, StopReason
    from inspect_ai.tool import ToolCallError, ToolInfo

SCORER = "tuiagent_answer"  # ours: the name the score has in inspect (right/wrong against the gold)
TOOL = "python"  # ours: the tool a code block calls, as inspect names tool calls
# Ours: the tool as the model is told of it (core.prompts.TOOL_SYSTEM, CALCULATOR_SYSTEM), for the
# model events' tool list, by RunSettings.tool.
TOOL_DESCRIPTIONS = {
    "python": "Python run in a Jupyter kernel where math, sympy, numpy (as np) and fractions are imported; "
    "what it prints comes back in an ```output block.",
    "calculator": "A calculator: one arithmetic expression (numbers, + - * / // % **, parentheses); its value "
    "comes back in an ```output block.",
}
# How a turn stopped (TurnEnded.stop) in inspect's words (StopReason); ours.
STOP_REASONS: dict[str, StopReason] = {"eos": "stop", "length": "max_tokens"}
# A run's end (RunFinished.reason) that is one of inspect's sample limits, with the budget behind it.
LIMITS = {
    "token_budget": ("token", "max_tokens"),
    "time_budget": ("time", "max_wall_s"),
    "tool_budget": ("custom", "max_tool_calls"),
}


@dataclass(frozen=True)
class RunSample:
    """One run to become a sample: its events, the sample's id and epoch, and what else to keep
    in its metadata (an eval adds its record: dataset, setting, seed, every guard's numbers)."""

    events: list[ev.Event]
    id: str
    epoch: int = 1
    metadata: Mapping[str, Any] = field(default_factory=dict)
    path: Path | None = None  # the trajectory file it was read from


# -- messages -------------------------------------------------------------------------------------


def utc(t: float) -> datetime:
    """An event's time (seconds since the epoch) as inspect's timestamps take it."""
    return datetime.fromtimestamp(t, UTC)


def run_start(events: Sequence[ev.Event]) -> ev.RunStarted:
    """The run's RunStarted event (every sample needs its problem, model and settings)."""
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    if started is None:
        raise UserError("a run without its start cannot be exported")
    return started


def _opening(started: ev.RunStarted, prefix: str) -> list[ChatMessage]:
    """The system prompt and the problem, as ``core.prompts.messages`` gave them to the chat template
    (a run whose rendered prompt does not hold them, from another version: the rendered prompt)."""
    from inspect_ai.model import ChatMessageSystem, ChatMessageUser

    tool = str(started.settings.get("tool", "python"))
    system, user = prompts.messages(started.problem, mode=started.mode, tool=tool)
    if system["content"] in started.prompt and user["content"] in started.prompt:
        return [
            ChatMessageSystem(id=f"{prefix}:system", content=system["content"], source="input"),
            ChatMessageUser(id=f"{prefix}:problem", content=user["content"], source="input"),
        ]
    return [
        ChatMessageUser(
            id=f"{prefix}:prompt", content=started.prompt, source="input", metadata={"rendered_prompt": True}
        )
    ]


def _call_id(call: int | None) -> str:
    return f"call_{call}"


def _tool_error(result: ev.ToolResult | None) -> ToolCallError | None:
    from inspect_ai.tool import ToolCallError

    if result is None:
        return None
    if not result.executed:
        return ToolCallError("cancelled", "not run: " + result.shown)
    if result.timed_out:
        return ToolCallError("timeout", "the cell timed out")
    if result.error:
        return ToolCallError("unknown", result.error_name or "the cell raised an error")
    return None


@dataclass
class _Run:
    """What a run's segments need to become messages: its code and results by call, the model, and
    an id per segment, so a segment is the same message in every model call's input (inspect's
    ``messages_df`` counts a message once by its id)."""

    model: str
    prefix: str  # the sample's uuid
    code: dict[int, str] = field(default_factory=dict)
    results: dict[int, ev.ToolResult] = field(default_factory=dict)
    ids: dict[tuple[str, int, int | None, str, str], str] = field(default_factory=dict)

    @classmethod
    def of(cls, events: Iterable[ev.Event], model: str, prefix: str) -> _Run:
        out = cls(model, prefix)
        for e in events:
            if isinstance(e, ev.CodeBlock):
                out.code[e.call] = e.code
            elif isinstance(e, ev.ToolResult):
                out.results[e.call] = e
        return out

    def id(self, s: Segment) -> str:
        return self.ids.setdefault((s.kind, s.turn, s.call, s.source, s.text), f"{self.prefix}:{len(self.ids) + 1}")


def _messages(
    segments: Iterable[Segment], run: _Run, marks: Mapping[int, PruneMark] | None = None
) -> list[ChatMessage]:
    """Segments of a working context (the prompt left out) as inspect messages; ``marks``: what a
    guard pruned from each turn, named in each pruned message's metadata."""
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser
    from inspect_ai.tool import ToolCall, ToolCallContent

    out: list[ChatMessage] = []
    last_call: int | None = None
    for s in segments:
        if s.kind == "prompt":
            continue
        meta: dict[str, Any] = {"turn": s.turn, "segment": s.kind}
        mark = (marks or {}).get(s.turn)
        if mark is not None and s.kind in mark.parts:
            meta.update(pruned_by=mark.label + (f" ({mark.detail})" if mark.detail else ""), pruned=[s.kind])
        if s.kind == "model":
            out.append(
                ChatMessageAssistant(id=run.id(s), content=s.text, model=run.model, source="generate", metadata=meta)
            )
        elif s.kind == "code":
            last_call = s.call
            call = ToolCall(
                id=_call_id(s.call),
                function=TOOL,
                arguments={"code": run.code.get(s.call or 0, s.text)},
                view=ToolCallContent(title=TOOL, format="markdown", content=s.text),
            )
            previous = out[-1] if out else None
            if (
                isinstance(previous, ChatMessageAssistant)
                and not previous.tool_calls
                and previous.metadata
                and previous.metadata.get("turn") == s.turn
            ):
                previous.tool_calls = [call]
                previous.metadata["call"] = s.call
                if "pruned" in meta:  # the code left the context (its prose may have stayed)
                    previous.metadata.update(
                        pruned_by=meta["pruned_by"], pruned=[*previous.metadata.get("pruned", []), "code"]
                    )
            else:
                out.append(
                    ChatMessageAssistant(
                        id=run.id(s),
                        content="",
                        tool_calls=[call],
                        model=run.model,
                        source="generate",
                        metadata=meta | {"call": s.call},
                    )
                )
        elif s.kind == "tool":
            call_no = s.call if s.call is not None else last_call
            result = run.results.get(call_no or 0)
            out.append(
                ChatMessageTool(
                    id=run.id(s),
                    content=result.shown if result else s.text,
                    tool_call_id=_call_id(call_no),
                    function=TOOL,
                    error=_tool_error(result),
                    metadata=meta | {"call": call_no, "context_text": s.text},
                )
            )
        else:  # a note the loop or a guard appended
            out.append(
                ChatMessageUser(id=run.id(s), content=s.text, source="input", metadata=meta | {"source": s.source})
            )
    return out


def _whole_run(events: Sequence[ev.Event]) -> list[Segment]:
    """Every segment that entered the context, in order: the one fold (``WorkingContext.apply``) with
    the prunes left out, so what a guard removed stays (its messages are marked)."""
    context: WorkingContext | None = None
    for e in events:
        if isinstance(e, ev.RunStarted):
            context = WorkingContext(e.prompt, e.mode)
        elif context is not None and not isinstance(e, ev.ContextPruned):
            context.apply(e)
    return context.segments if context is not None else []


# -- the transcript -------------------------------------------------------------------------------


def _code_tool(tool: str) -> ToolInfo:
    from inspect_ai.tool import ToolInfo, ToolParam, ToolParams

    return ToolInfo(
        name=TOOL,
        description=TOOL_DESCRIPTIONS.get(tool, TOOL_DESCRIPTIONS["python"]),
        parameters=ToolParams(properties={"code": ToolParam(type="string", description="the cell")}, required=["code"]),
    )


def _turn_output(
    turn_messages: Sequence[ChatMessage],
    turn: ev.TurnEnded,
    model: str,
    context_tokens: int,
    tokens: Sequence[ev.TokenDelta],
) -> ModelOutput:
    """A turn as the model call's output (its prose and code make one assistant message), with each
    sampled token's log-probability when the backend gave them all."""
    from inspect_ai.model import ChatCompletionChoice, ChatMessageAssistant, Logprob, Logprobs, ModelOutput, ModelUsage

    message = next(
        (m for m in turn_messages if isinstance(m, ChatMessageAssistant)),
        ChatMessageAssistant(content="", model=model, source="generate"),
    )
    stop: StopReason = "tool_calls" if message.tool_calls else STOP_REASONS.get(turn.stop, "unknown")
    logprobs = None
    if tokens and all(t.logprob is not None for t in tokens):
        logprobs = Logprobs(content=[Logprob(token=t.text, logprob=t.logprob or 0.0) for t in tokens])
    choice = ChatCompletionChoice(message=message, stop_reason=stop, logprobs=logprobs)
    return ModelOutput(
        model=model,
        choices=[choice],
        completion=turn.text,
        usage=ModelUsage(
            input_tokens=context_tokens, output_tokens=turn.tokens, total_tokens=context_tokens + turn.tokens
        ),
        metadata={"turn": turn.turn, "stop": turn.stop},
    )


def _transcript(events: Sequence[ev.Event], run: _Run, opening: list[ChatMessage]) -> list[InspectEvent]:
    """Inspect's events of the run: a model call per turn over the working context as it was then,
    a tool event per call, an info event per guard verdict, prune, toggle during the run and notice."""
    from inspect_ai.event import InfoEvent, ModelEvent, ToolEvent
    from inspect_ai.tool import ToolCallContent

    started = run_start(events)
    config, model = generate_config(started.sampling), run.model
    tools = [_code_tool(str(started.settings.get("tool", "python")))] if started.mode == "tool" else []
    out: list[InspectEvent] = []
    context: WorkingContext | None = None
    turn: tuple[ev.TurnStarted, list[ChatMessage]] | None = None
    tokens: list[ev.TokenDelta] = []

    def at(e: ev.Event) -> dict[str, Any]:
        return {"timestamp": utc(e.t), "working_start": max(e.t - started.t, 0.0)}

    def info(source: str, e: ev.Event, data: dict[str, Any]) -> None:
        out.append(InfoEvent(source=source, data=data, **at(e)))

    for e in events:
        if isinstance(e, ev.RunStarted):
            context = WorkingContext(e.prompt, e.mode)
            continue
        if context is None:
            continue
        if isinstance(e, ev.TurnStarted):
            turn, tokens = (e, opening + _messages(context.segments, run)), []
        elif isinstance(e, ev.TokenDelta):
            tokens.append(e)
        before = len(context.segments)
        context.apply(e)
        if isinstance(e, ev.TurnEnded) and turn is not None:
            began, seen = turn
            output = _turn_output(
                _messages(context.segments[before:], run),
                e,
                model,
                began.context_tokens,
                [t for t in tokens if t.turn == e.turn],
            )
            out.append(
                ModelEvent(
                    model=model,
                    input=seen,
                    tools=tools,
                    tool_choice="auto" if tools else "none",
                    config=config,
                    output=output,
                    completed=utc(e.t),
                    working_time=max(e.t - began.t, 0.0),
                    **at(began),
                )
            )
            turn = None
        elif isinstance(e, ev.ToolResult):
            code = run.code.get(e.call, "")
            out.append(
                ToolEvent(
                    id=_call_id(e.call),
                    function=TOOL,
                    arguments={"code": code},
                    view=ToolCallContent(title=TOOL, format="markdown", content=f"```python\n{code}\n```"),
                    result=e.shown,
                    error=_tool_error(e),
                    completed=utc(e.t),
                    working_time=e.duration_s,
                    metadata={"call": e.call, "executed": e.executed},
                    **at(e),
                )
            )
        elif isinstance(e, ev.GuardVerdict):
            info(
                f"guard {e.guard}",
                e,
                {
                    "hook": e.hook,
                    "action": e.action,
                    "note": verdict_note(e).text,
                    "reason": e.reason,
                    "text": e.text,
                    "turn": e.turn,
                    "data": e.data,
                },
            )
        elif isinstance(e, ev.ContextPruned):
            info(
                f"guard {e.guard}",
                e,
                {
                    "action": "pruned" if e.keep is not None else "truncated for a resample",
                    "removed_text": e.removed_text,
                    "keep": e.keep,
                    "truncate_to": e.truncate_to,
                },
            )
        elif isinstance(e, ev.GuardToggled) and e.reason not in ("on at start", "") and not is_fork_mark(e):
            info(f"guard {e.guard}", e, {"enabled": e.enabled, "settings": e.settings, "reason": e.reason})
        elif isinstance(e, ev.Notice):
            info("tuiagent", e, {"level": e.level, "message": e.message})
        elif isinstance(e, ev.Intervention):
            data = {k: v for k, v in ev.to_dict(e).items() if k not in ("type", "t")}
            info(f"intervention by a {e.by}", e, {"action": intervention_label(e), **data})
    if turn is not None:  # the run stopped during a turn (a kill, a crash): what it had streamed
        from inspect_ai.model import ModelOutput

        began, seen = turn
        streamed = [t for t in tokens if t.turn == began.turn]
        last = streamed[-1] if streamed else began
        out.append(
            ModelEvent(
                model=model,
                input=seen,
                tools=tools,
                tool_choice="auto" if tools else "none",
                config=config,
                output=ModelOutput.from_content(model, "".join(t.text for t in streamed), stop_reason="unknown"),
                error="the run stopped during this turn: its text as far as it streamed",
                completed=utc(last.t),
                working_time=max(last.t - began.t, 0.0),
                **at(began),
            )
        )
    return out


# -- a sample -------------------------------------------------------------------------------------


def generate_config(sampling: Mapping[str, Any]) -> GenerateConfig:
    """The run's sampling in inspect's GenerateConfig, whose fields of these names mean the same
    (``max_tokens`` bounds one turn in both); all of it is in the sample's metadata too."""
    from inspect_ai.model import GenerateConfig

    keys = ("temperature", "top_p", "top_k", "seed", "max_tokens")
    return GenerateConfig(**{k: sampling[k] for k in keys if sampling.get(k) is not None})


def guard_settings(events: Iterable[ev.Event]) -> dict[str, dict[str, Any]]:
    """The settings of each guard on at the start of the run."""
    out: dict[str, dict[str, Any]] = {}
    for e in events:
        if isinstance(e, ev.TurnStarted):
            break
        if isinstance(e, ev.GuardToggled) and e.reason in ("on at start", ""):
            if e.enabled:
                out[e.guard] = dict(e.settings)
            else:
                out.pop(e.guard, None)
    return out


def model_name(model_id: str) -> str:
    """The model as inspect names one (provider/model): tuiagent ran it."""
    return f"tuiagent/{model_id}"


def sample(run: RunSample) -> EvalSample:
    """One run as an inspect sample: messages, transcript, score, metadata, usage and limit."""
    from inspect_ai.event import ModelEvent
    from inspect_ai.log import EvalError, EvalSample, EvalSampleLimit
    from inspect_ai.model import ModelOutput, ModelUsage
    from inspect_ai.scorer import CORRECT, INCORRECT, Score

    events = run.events
    started = run_start(events)
    finished = next((e for e in reversed(events) if isinstance(e, ev.RunFinished)), None)
    s = summary(events)
    model = model_name(started.model_id)
    uuid = f"{started.run_id}:{run.id}:{run.epoch}"  # unique over an eval's settings, as samples_df needs
    pieces, opening = _Run.of(events, model, uuid), _opening(started, uuid)
    messages = opening + _messages(_whole_run(events), pieces, pruned_parts(events))
    transcript = _transcript(events, pieces, opening)
    outputs = [m.output for m in transcript if isinstance(m, ModelEvent)]
    turns = [e for e in events if isinstance(e, ev.TurnStarted)]
    usage = ModelUsage(
        input_tokens=sum(t.context_tokens for t in turns),
        output_tokens=s.generated_tokens,
        total_tokens=sum(t.context_tokens for t in turns) + s.generated_tokens,
    )
    metadata: dict[str, Any] = {
        "run_id": started.run_id,
        "model_id": started.model_id,
        "backend": started.backend,
        "mode": started.mode,
        "guards": s.guards,
        "guard_settings": guard_settings(events),
        "run_settings": started.settings,
        "sampling": started.sampling,
        "end_reason": s.reason,
        "answer": s.answer,
        "correct": s.correct,
        "gold": started.gold,
        "tool_calls": s.tool_calls,
        "erroneous_calls": s.erroneous_calls,
        "generated_tokens": s.generated_tokens,
        "context_tokens": s.context_tokens,
        "wall_s": s.wall_s,
        "turns": len(turns),
        **{k: v for k, v in run_metrics(events).items() if v is not None},
        "trajectory": str(run.path) if run.path else s.trajectory,
        "parent": started.parent,
        "interventions": [
            {k: v for k, v in ev.to_dict(e).items() if k not in ("type", "t")}
            for e in events
            if isinstance(e, ev.Intervention)
        ],
    }
    metadata.update({k: v for k, v in run.metadata.items() if k not in metadata})
    scores = None
    if s.correct is not None:
        scores = {
            SCORER: Score(
                value=CORRECT if s.correct else INCORRECT,
                answer=s.answer,
                explanation=f"{'no answer' if s.answer is None else f'answer {s.answer!r}'}, "
                f"gold {started.gold!r}: "
                f"{'right' if s.correct else 'wrong'} (the run ended: {s.reason})",
                metadata={"gold": started.gold, "end_reason": s.reason},
            )
        }
    limit = None
    if s.reason in LIMITS:
        kind, budget = LIMITS[s.reason]
        value = started.settings.get(budget)
        if isinstance(value, (int, float)):
            # kind is one of EvalSampleLimitType's values, a Literal inspect_ai.log does not export
            limit = EvalSampleLimit(type=kind, limit=float(value), reason=s.reason)  # type: ignore[arg-type]
    error = None
    if finished is None or s.reason in ("error", "backend_crashed", "kernel_failed"):
        why = next((e.message for e in reversed(events) if isinstance(e, ev.Notice) and e.level == "error"), "")
        message = why or ("the trajectory has no end: the run did not finish" if finished is None else s.reason)
        error = EvalError(message=message, traceback="", traceback_ansi="")
    return EvalSample(
        id=run.id,
        epoch=run.epoch,
        input=started.problem,
        target=started.gold or "",
        messages=messages,
        output=outputs[-1] if outputs else ModelOutput(model=model),
        scores=scores,
        metadata=metadata,
        events=transcript,
        model_usage={model: usage},
        started_at=utc(started.t).isoformat(),
        completed_at=utc(events[-1].t).isoformat(),
        total_time=s.wall_s,
        working_time=s.wall_s,
        uuid=uuid,
        error=error,
        limit=limit,
    )
