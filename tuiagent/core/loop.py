r"""The tool-integrated reasoning loop.

The chat template is rendered once; after that the model continues its own
assistant turn as raw text. A turn ends at the ```output fence, end of sequence
or a budget. A closed ```python block runs in the kernel and its output comes
back as an ```output block; the run ends at a final \boxed{} answer, a budget
or a cancel. Guards are consulted at each decision point and only the loop acts
on their verdicts. Every event goes to the recorder before anyone else sees it.

Events take one path: ``emit`` folds, records and queues each one, and the run's driver
(``_Run.events``) hands the queue to the consumer wherever the run is about to wait on the
model, the kernel or the user, and when it ends (docs/architecture.md#one-run).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, fields, replace
from typing import Any

from guards.chain import GuardChain, Toggle
from kernels.base import CellResult, Kernel, KernelFailed, Output
from tuiagent.backends.base import Backend, BackendCrashed, ExactResume
from tuiagent.core import prompts
from tuiagent.core.context import WorkingContext, prose_end
from tuiagent.core.events import (
    AnswerAttempt,
    CodeBlock,
    ContextAppended,
    ContextPruned,
    Event,
    GuardToggled,
    GuardVerdict,
    Intervention,
    Notice,
    RunFinished,
    RunStarted,
    TokenDelta,
    ToolResult,
    TurnEnded,
    TurnStarted,
)
from tuiagent.core.faults import FaultInjector
from tuiagent.core.fork import Edit, ForkPoint, fork_notice, restore_kernel, restore_model
from tuiagent.core.judge import ask as ask_judge
from tuiagent.core.steps import run_pieces
from tuiagent.core.trajectory import Recorder, new_run_id
from tuiagent.core.verify import is_correct
from tuiagent.parsing import OUTPUT_FENCE, final_answer, last_closed_block, tool_block_start
from tuiagent.protocol import (
    CONTINUE,
    INJECT,
    PRUNE,
    RESAMPLE,
    SKIP,
    SUSPEND,
    Call,
    EndReason,
    JudgeReply,
    Layout,
    RunSettings,
    RunView,
    Sampling,
    TokenLP,
    TokenStream,
    TurnStop,
    Verdict,
    tools_return_turn,
    with_guard_needs,
)

_SAMPLING_FIELDS = frozenset(f.name for f in fields(Sampling)) - {"max_tokens"}


def resample_sampling(data: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling overrides of a truncating verdict: the Sampling fields in ``data["sampling"]``
    when present (the rest of ``data`` is the verdict's numbers, for the record), else the Sampling
    fields among ``data``'s own keys. ``max_tokens`` stays the loop's (it enforces the token budget)."""
    source = data.get("sampling", data)
    return {k: v for k, v in source.items() if k in _SAMPLING_FIELDS} if isinstance(source, dict) else {}


def opening_prompt(backend: Backend, problem: str, settings: RunSettings) -> str:
    """The text a new run of ``problem`` starts from: the chat rendered with the model's template."""
    return backend.render_chat(prompts.messages(problem, mode=settings.mode, tool=settings.tool))


# What a run with ``first_call = "required"`` starts its first turn with: the model writes the code
# of its first tool call before anything else (RunSettings.first_call).
FIRST_CALL_OPENING = "```python\n"


class _Finish(Exception):
    """Ends the run from deep inside the loop with a reason and an answer. A run cut off (a budget)
    or ending without an answer reports the turn's own \\boxed{} if a cut turn has one, else the last
    answer attempt a guard sent back (G-STEP's continue), else none: never a \\boxed{} that the
    prompt's example or a note put in the context."""

    def __init__(self, reason: EndReason, answer: str | None = None):
        self.reason, self.answer = reason, answer


class Agent:
    """Runs one problem at a time with a backend, a started kernel (tool mode) and optional guards."""

    def __init__(
        self,
        backend: Backend,
        kernel: Kernel | None,
        *,
        sampling: Sampling | None = None,
        settings: RunSettings | None = None,
        recorder: Recorder | None = None,
        guards: GuardChain | None = None,
        approve: Callable[[str], Awaitable[bool]] | None = None,
        notices: Sequence[Notice] = (),
        kernel_failed: KernelFailed | None = None,
        judge_models: Callable[[str], Awaitable[Backend]] | None = None,
        faults: FaultInjector | None = None,
    ):
        """``approve``, when given, is asked before each code block runs (the "ask before running
        code" setting); a block it declines is answered with a note instead of an output.
        ``kernel_failed``: the tool kernel could not start, so a run is recorded to say so and ends
        at once as ``kernel_failed``. ``judge_models``: the open backend of a models.toml id, for a
        guard's judge that names a model other than the one under test (the runner's JudgeModels).
        ``faults``: the faults injected into tool outputs (``core.faults``: a plan, or armed by a person
        while the run goes on); each is recorded as an Intervention right before its output."""
        self.backend = backend
        self.kernel = kernel
        self.sampling = sampling or Sampling()
        self.settings = settings or RunSettings()
        self.recorder = recorder
        self.guards = guards
        self.approve = approve
        self.notices = tuple(notices)  # recorded right after RunStarted (the runner's: the sandbox in force)
        self.kernel_failed = kernel_failed
        self.judge_models = judge_models
        self.faults = faults
        if self.settings.mode == "tool" and kernel is None and kernel_failed is None:
            raise ValueError("tool mode needs a kernel")

    async def stream(
        self, problem: str, *, gold: str | None = None, run_id: str | None = None, fork: ForkPoint | None = None
    ) -> AsyncIterator[Event]:
        """Yield the run's events as they happen. Cancelling the consumer cancels the run;
        the RunFinished event is still recorded.

        ``fork``: start from a recorded run's step instead of the problem (``problem`` is then the
        parent's): its events so far are copied, the model and kernel states rebuilt, and the run
        goes on from there with this agent's settings and guards (see ``tuiagent.core.fork``)."""
        run = _Run(self, problem, gold, run_id or new_run_id(), fork)
        async for event in run.events():
            yield event


class _Run:
    """The state of one run: the working context, the calls so far and the counters the summary needs."""

    def __init__(self, agent: Agent, problem: str, gold: str | None, run_id: str, fork: ForkPoint | None = None):
        self.agent = agent
        # the budgets the guards on at the start need, where the user set none (RunSettings.raised)
        self.settings = with_guard_needs(agent.settings, agent.guards.needs() if agent.guards is not None else {})
        self.problem, self.gold, self.run_id, self.fork = problem, gold, run_id, fork
        if fork is not None:
            prompt = fork.started.prompt
        else:
            prompt = opening_prompt(agent.backend, problem, agent.settings)
        self.context = WorkingContext(prompt, mode=agent.settings.mode)  # changed only by events (emit)
        self.turn = 0
        self.calls: list[Call] = []
        self.erroneous_calls = 0
        self.generated = 0
        self.budget_noted = False
        self.tools_suspended = False
        self.tools_back_at: int | None = (
            None  # the turn a suspended tool returns at; None: none due (not suspended, or for good)
        )
        self.suspended_by = ""  # the guard whose verdict suspended it
        self.answer_attempts = 0
        self.last_attempt: str | None = None  # the last answer a guard sent back (continue)
        self.resample: dict[str, Any] | None = None
        self.turn_text = ""
        self.turn_tokens: list[TokenLP] = []
        self.started = time.monotonic() - (fork.elapsed_s if fork is not None else 0.0)
        self._queue: list[Event] = []  # emitted, not yet handed to the consumer (events())
        self.history: list[Event] = []  # every event emitted but the tokens (what run_pieces folds)

    # -- events ---------------------------------------------------------------------------------

    def emit(self, event: Event) -> None:
        """The one path of every event: the working context, the history, the recorder, then the
        queue that ``events`` hands to the consumer."""
        self.context.apply(event)
        if not isinstance(event, TokenDelta):
            self.history.append(event)
        if self.agent.recorder is not None:
            self.agent.recorder.write(event)
        self._queue.append(event)

    def _handed_over(self) -> list[Event]:
        out, self._queue = self._queue, []
        return out

    def _toggled(self, toggles: list[Toggle]) -> None:
        for t in toggles:
            self.emit(GuardToggled(guard=t.guard, enabled=t.enabled, settings=t.settings, reason=t.reason))

    async def events(self) -> AsyncIterator[Event]:
        """The driver: runs ``_body`` and hands over what it emitted at each of its yields (a point
        where it is about to wait) and once the run has finished, so no event is left behind."""
        backend = self.agent.backend
        self.emit(
            RunStarted(
                run_id=self.run_id,
                problem=self.problem,
                model_id=backend.model_id,
                backend=type(backend).__name__,
                mode=self.settings.mode,
                prompt=self.context.text,
                sampling=asdict(self.agent.sampling),
                settings=self.settings.record(),
                gold=self.gold,
                parent=self.fork.parent if self.fork is not None else None,
            )
        )
        for notice in self.agent.notices:
            self.emit(notice)
        reason: EndReason = "error"
        answer: str | None = None
        try:
            async for _ in self._body():
                for event in self._handed_over():
                    yield event
        except _Finish as finish:
            reason, answer = finish.reason, finish.answer
        except (asyncio.CancelledError, GeneratorExit):
            self._finish("cancelled", None)
            raise
        except BackendCrashed as e:  # the model's process died: the app, and this record, go on
            reason = "backend_crashed"
            self.emit(Notice(level="error", message=str(e)))
        except KernelFailed as e:  # the kernel would not start (again): said in full, the run ends
            reason = "kernel_failed"
            self.emit(Notice(level="error", message=str(e)))
        except Exception as e:  # a backend or kernel failure ends the run readably, not with a traceback
            self.emit(Notice(level="error", message=f"{type(e).__name__}: {e}"))
        await self._consult("on_finish", answer=answer)
        self._finish(reason, answer)
        for event in self._handed_over():
            yield event

    async def _body(self) -> AsyncIterator[None]:
        """The run from its start to a _Finish; it yields before each wait the consumer should not
        be kept from seeing (a fork's rebuilt states, the model's turn and each token, a code block
        before it is approved and run)."""
        if self.agent.kernel_failed is not None:
            raise self.agent.kernel_failed
        edit = self.fork.edit if self.fork is not None else None
        if self.fork is not None:
            await self._resume(self.fork)
            yield
        if self.agent.guards is not None:
            self._toggled(self.agent.guards.start())
        if edit is not None and edit.target != "text":  # the step the edit is in goes on first
            async for _ in self._edited_step(edit):
                yield
        self._apply(await self._consult("on_start"))
        if edit is None and self.turn == 0 and self.settings.first_call == "required" and self.settings.mode == "tool":
            edit = Edit("text", 1, "", FIRST_CALL_OPENING, token=0)
            self.emit(replace(edit.event(by="protocol"), detail={"rule": "first_call=required"}))
        elif edit is not None and edit.target == "text":
            self.emit(edit.event())
        if edit is not None and edit.target == "text":
            async for _ in self._turn(edit):
                yield
        while True:
            async for _ in self._turn():
                yield

    async def _resume(self, point: ForkPoint) -> None:
        """Take over the parent's events before the fork point, then rebuild the model's and the
        kernel's states (each check recorded as a Notice). A parent's notice this run has recorded
        already (the sandbox in force, when it is the same) is not taken over a second time."""
        code: dict[int, CodeBlock] = {}
        said = {(n.level, n.message) for n in self.agent.notices}
        parent_on: dict[str, Any] = {}  # the parent's guards on at this point, with their settings
        taken_over: set[str] = set()  # the guards shown the parent's steps again
        answered = 0  # the last turn whose on_answer was asked again
        for e in point.prefix:
            if isinstance(e, Notice) and (e.level, e.message) in said:
                continue
            self.emit(e)
            if isinstance(e, GuardToggled):
                if e.enabled:
                    parent_on[e.guard] = e.settings
                else:
                    parent_on.pop(e.guard, None)
            if isinstance(e, TurnStarted):
                self.turn, self.turn_tokens = e.turn, []
            elif isinstance(e, TokenDelta):
                self.turn_tokens.append(TokenLP(e.text, e.logprob))
            elif isinstance(e, TurnEnded):
                self.turn_text = e.text
                self.generated += e.tokens
            elif isinstance(e, CodeBlock):
                code[e.call] = e
            elif isinstance(e, ToolResult) and e.call in code:
                block = code[e.call]
                self.calls.append(
                    Call(
                        call=e.call,
                        turn=block.turn,
                        code=block.code,
                        output=e.shown,
                        error=e.error,
                        timed_out=e.timed_out,
                        executed=e.executed,
                    )
                )
                self.erroneous_calls += e.executed and e.error
                self.budget_noted |= not e.executed and e.shown == prompts.BUDGET_NOTE
                taken_over |= await self._rebuild_guards("on_tool_result", self.calls[-1], parent=parent_on)
            elif isinstance(e, GuardVerdict) and e.hook == "on_answer" and answered < self.turn:
                # the parent asked on_answer at this turn's end: as then, the attempt is counted first
                answered, answer = self.turn, final_answer(self.turn_text)
                self.answer_attempts += answer is not None
                taken_over |= await self._rebuild_guards("on_answer", answer, parent=parent_on, answer=answer)
                self.answer_attempts -= answer is not None
            elif isinstance(e, AnswerAttempt) and not e.final:
                self.answer_attempts += 1
                self.last_attempt = e.answer
            elif isinstance(e, GuardVerdict) and e.action == SUSPEND:
                self._suspend(e.guard, e.turn, e.data)
            elif isinstance(e, ContextAppended) and e.text.strip() == prompts.TOOLS_BACK_NOTE.strip():
                self.tools_suspended, self.tools_back_at = False, None
        self._renumber_calls()
        self.emit(fork_notice(point))
        if taken_over:
            self.emit(
                Notice(
                    level="info",
                    message=f"guard state taken over: {', '.join(sorted(taken_over))} shown the parent's steps again, "
                    "so each goes on from the state the parent left",
                )
            )
        stop = [OUTPUT_FENCE] if self.settings.mode == "tool" else []
        self.emit(await restore_model(self.agent.backend, point, stop))
        rebuilt = await restore_kernel(
            self.agent.kernel, point.cells, self.settings.exec_timeout_s, self.settings.output_chars
        )
        if rebuilt is not None:
            self.emit(rebuilt)

    async def _rebuild_guards(
        self, hook: str, *args: object, parent: Mapping[str, Any], answer: str | None = None
    ) -> set[str]:
        """Ask the guards that carry state ``hook`` again at a step of the parent (``GuardChain.rebuild``)."""
        if self.agent.guards is None:
            return set()
        return set(await self.agent.guards.rebuild(hook, *args, self.view(answer), parent=parent))

    async def _edited_step(self, edit: Edit) -> AsyncIterator[None]:
        """An edit fork's step from its edit on: a tool output shown in place of the recorded one
        (the guards then read it), or a code block in place of the recorded one, run for real."""
        self.emit(edit.event())
        if edit.target == "output":
            assert edit.result is not None and edit.call is not None
            code = next(e.code for e in reversed(self.history) if isinstance(e, CodeBlock) and e.call == edit.call)
            result = CellResult(outputs=(Output("stdout", edit.replacement),), duration_s=edit.result.duration_s)
            self._output(edit.call, code, edit.replacement, result, executed=edit.result.executed)
            self._apply(await self._consult("on_tool_result", self.calls[-1]))
            return
        ended = edit.turn_end
        assert ended is not None
        text = edit.turn_text()
        self.turn_text = text
        self.generated += ended.tokens
        self.emit(
            TurnEnded(
                turn=ended.turn,
                text=text,
                stop=ended.stop,
                tokens=ended.tokens,
                prose_end=prose_end(text, ended.stop, self.context.mode),
            )
        )
        yield
        async for _ in self._act(ended.stop):
            yield

    def _finish(self, reason: EndReason, answer: str | None) -> None:
        correct = is_correct(self.gold, answer) if self.gold is not None else None
        if answer is not None:
            self.emit(AnswerAttempt(turn=self.turn, answer=answer, final=True))
        self.emit(
            RunFinished(
                reason=reason,
                answer=answer,
                correct=correct,
                tool_calls=sum(c.executed for c in self.calls),
                erroneous_calls=self.erroneous_calls,
                generated_tokens=self.generated,
                context_tokens=self.agent.backend.count_tokens(self.context.text),
                wall_s=round(time.monotonic() - self.started, 3),
                trajectory=str(self.agent.recorder.path) if self.agent.recorder else None,
            )
        )

    # -- guards ---------------------------------------------------------------------------------

    def view(self, answer: str | None = None) -> RunView:
        return RunView(
            problem=self.problem,
            mode=self.settings.mode,
            turn=self.turn,
            turn_text=self.turn_text,
            turn_tokens=self.turn_tokens,
            calls=tuple(self.calls),
            segments=tuple(self.context.segments),
            max_tool_calls=self.settings.max_tool_calls,
            tools_suspended=self.tools_suspended,
            answer=answer,
            answer_attempts=self.answer_attempts,
            judge=self._judge,
            trajectory=run_pieces(self.history),
        )

    async def _judge(self, question: str, max_tokens: int = 3, model: str | None = None) -> JudgeReply:
        """Ask a model a short question in a fresh chat (greedy): the model under test, or the
        models.toml entry ``model``. On the model under test this costs the prefix cache (the next
        turn re-evaluates the context); another model leaves the run's cache alone."""
        backend = self.agent.backend
        if model and model != backend.model_id:
            if self.agent.judge_models is None:
                raise LookupError(f"judge model {model!r}: this run was given no models to open it from")
            backend = await self.agent.judge_models(model)
        return await ask_judge(backend, question, max_tokens)

    async def _consult(self, hook: str, *args: object, answer: str | None = None) -> list[Verdict]:
        guards = self.agent.guards
        if guards is None:
            return []
        verdicts, toggles = await guards.consult(hook, *args, self.view(answer))
        self._toggled(toggles)  # changes applied before the guards were asked come first
        for v in verdicts:
            self.emit(
                GuardVerdict(
                    hook=hook,
                    guard=v.guard,
                    action=v.action,
                    reason=v.reason,
                    text=v.text,
                    data=dict(v.data),
                    turn=self.turn,
                )
            )
        return verdicts

    def _apply(self, verdicts: list[Verdict]) -> None:
        """Act on context-changing verdicts, in the order the guards gave them."""
        for v in verdicts:
            if v.action == PRUNE and v.keep is not None:
                removed = [s.text for i, s in enumerate(self.context.segments) if i not in set(v.keep) and i]
                self.emit(ContextPruned(guard=v.guard, keep=list(v.keep), removed_text="".join(removed)))
                self._renumber_calls()
            elif v.action == RESAMPLE and v.truncate_to is not None:
                self._truncate(v)
            elif v.action == SUSPEND:
                if v.truncate_to is not None:  # drop the context from there first (PruneTIR's RTTS)
                    self._truncate(v)
                self._suspend(v.guard, self.turn, v.data)
                self._append(v.text, source=v.guard)
            elif v.action in (INJECT, CONTINUE) and v.text:
                self._append(v.text, source=v.guard)

    def _suspend(self, guard: str, turn: int, data: Mapping[str, Any]) -> None:
        """Suspend the tool, for the span the verdict declares (``tools_return_turn``)."""
        self.tools_suspended, self.suspended_by = True, guard
        self.tools_back_at = tools_return_turn(turn, data)

    def _tools_back(self) -> None:
        """The suspension's span is over: code runs again, the model is told, the trajectory says so."""
        self.tools_suspended, self.tools_back_at = False, None
        self.emit(
            Notice(
                level="info",
                message=f"the tool is back from turn {self.turn}: {self.suspended_by}'s suspension is over",
            )
        )
        self._append(prompts.TOOLS_BACK_NOTE, source=self.suspended_by)

    def _truncate(self, v: Verdict) -> None:
        """Drop the context from segment ``v.truncate_to`` on; the next turn is sampled with the
        verdict's sampling overrides (see resample_sampling)."""
        removed = "".join(s.text for s in self.context.segments[v.truncate_to :])
        self.emit(ContextPruned(guard=v.guard, truncate_to=v.truncate_to, removed_text=removed))
        self._renumber_calls()
        self.resample = resample_sampling(v.data)

    def _renumber_calls(self) -> None:
        """Point each call at its code segment in the pruned context (None when it was pruned)."""
        where = {s.call: i for i, s in enumerate(self.context.segments) if s.kind == "code"}
        self.calls = [replace(c, segment=where.get(c.call)) for c in self.calls]

    # -- one turn -------------------------------------------------------------------------------

    def _remaining_wall(self) -> float:
        """Seconds left of the wall-time budget; infinite when the run has none (an eval's default)."""
        if self.settings.max_wall_s is None:
            return math.inf
        return self.settings.max_wall_s - (time.monotonic() - self.started)

    async def _turn(self, edit: Edit | None = None) -> AsyncIterator[None]:
        """Generate one turn, then act on it: run its code, or end the run. ``edit``: an edit fork's
        turn, which starts with the recorded turn's first tokens and the edit's text (``_resumed``)."""
        remaining_tokens = self.settings.max_tokens - self.generated
        if remaining_tokens <= 0:
            raise _Finish("token_budget", self.last_attempt)
        if self._remaining_wall() <= 0:
            raise _Finish("time_budget", self.last_attempt)
        self.turn += 1
        if self.tools_back_at is not None and self.turn >= self.tools_back_at:
            self._tools_back()
        backend = self.agent.backend
        self.emit(TurnStarted(turn=self.turn, context_tokens=backend.count_tokens(self.context.text)))
        yield

        sampling = replace(self.agent.sampling, max_tokens=min(self.agent.sampling.max_tokens, remaining_tokens))
        if self.resample:
            sampling = replace(sampling, **self.resample)
            self.resample = None
        stop = [OUTPUT_FENCE] if self.settings.mode == "tool" else []
        self.turn_tokens = []
        ids: list[int] | None = None
        layout: Layout | None = None
        try:
            async with (
                asyncio.timeout(None if math.isinf(left := self._remaining_wall()) else left),
                self._stream(sampling, stop, edit) as stream,
            ):
                async for token in stream:
                    self.turn_tokens.append(TokenLP(token.text, token.logprob))
                    self.emit(TokenDelta(turn=self.turn, text=token.text, logprob=token.logprob))
                    yield
            stop_reason: TurnStop = stream.stop_reason or "eos"
            ids, layout = stream.token_ids, stream.layout
        except TimeoutError:
            stop_reason = "time"
        except asyncio.CancelledError:
            self._end_turn("cancelled")
            raise
        except Exception as e:  # the backend failed mid-turn: keep and count what it gave, then end the run
            self._end_turn("backend_crashed" if isinstance(e, BackendCrashed) else "error")
            raise
        self._end_turn(stop_reason, ids, layout)
        yield

        async for _ in self._act(stop_reason):
            yield

    def _stream(self, sampling: Sampling, stop: list[str], edit: Edit | None) -> TokenStream:
        """The turn's generation. An edit of the model's text continues the recorded turn: on a
        backend that can (``ExactResume``, the same model, ids recorded) from its kept ids, exactly;
        elsewhere the kept tokens and the edit's text are taken over as recorded and the model
        continues from their text."""
        backend = self.agent.backend
        if edit is None:
            return backend.stream(self.context.text, sampling, stop)
        exact = self.fork is not None and backend.model_id == self.fork.started.model_id
        if exact and edit.kept_ids is not None and isinstance(backend, ExactResume):
            return backend.resume(self.context.text, sampling, stop, edit.kept_ids, edit.replacement)
        taken = [*edit.kept, *([(edit.replacement, None)] if edit.replacement else [])]
        for text, logprob in taken:
            self.turn_tokens.append(TokenLP(text, logprob))
            self.emit(TokenDelta(turn=self.turn, text=text, logprob=logprob))
        left = max(1, sampling.max_tokens - len(taken))
        return backend.stream(
            self.context.text + "".join(t for t, _ in taken), replace(sampling, max_tokens=left), stop
        )

    def _end_turn(self, stop: TurnStop, token_ids: list[int] | None = None, layout: Layout | None = None) -> None:
        text = "".join(t.text for t in self.turn_tokens)
        self.turn_text = text
        self.generated += len(self.turn_tokens)
        self.emit(
            TurnEnded(
                turn=self.turn,
                text=text,
                stop=stop,
                tokens=len(self.turn_tokens),
                token_ids=token_ids,
                layout=layout,
                prose_end=prose_end(text, stop, self.context.mode),
            )
        )

    async def _act(self, stop_reason: TurnStop) -> AsyncIterator[None]:
        text = self.turn_text
        asks_tool = tool_block_start(text, stop_reason, self.settings.mode) is not None
        block = last_closed_block(text) if asks_tool else None
        if block is not None:
            async for _ in self._call_tool(block.code):
                yield
            return
        answer = final_answer(text)
        if stop_reason == "time":
            raise _Finish("time_budget", answer if answer is not None else self.last_attempt)
        if stop_reason == "length":  # the run's token budget, or one turn's own limit with budget left
            ended: EndReason = "token_budget" if self.generated >= self.settings.max_tokens else "turn_length"
            raise _Finish(ended, answer if answer is not None else self.last_attempt)
        # a final submission: a text without a tool call, boxed or not (G-STEP's paper consults its
        # gate at any); ``answer`` is None when it has no \boxed{}
        self.answer_attempts += answer is not None
        verdicts = await self._consult("on_answer", answer, answer=answer)
        if any(v.action == CONTINUE for v in verdicts):
            if answer is not None:
                self.last_attempt = answer
                self.emit(AnswerAttempt(turn=self.turn, answer=answer, final=False))
            self._apply(verdicts)
            return
        if answer is None:
            raise _Finish("no_answer", self.last_attempt)
        raise _Finish("answer", answer)

    async def _call_tool(self, code: str) -> AsyncIterator[None]:
        call = self.context.blocks  # numbered when the turn that holds it ended
        self.emit(CodeBlock(turn=self.turn, call=call, code=code))
        skip = await self._skip_reason(code)
        if skip is None:
            yield  # the block is shown before anyone is asked about it
            if self.agent.approve is not None and not await self.agent.approve(code):
                self.emit(Notice(level="warning", message=f"code block {call} not run: the user declined"))
                skip = prompts.DECLINED_NOTE
        if skip is not None:
            self._output(call, code, skip, CellResult(), executed=False)
            return
        kernel = self.agent.kernel
        if kernel is None:  # Agent refuses tool mode without one, and only tool mode calls the tool
            raise RuntimeError("tool mode needs a kernel")
        # the run's wall-time budget holds during a cell too
        limit = max(min(self.settings.exec_timeout_s, self._remaining_wall()), 0.1)
        result = await kernel.execute(code, limit)
        shown = prompts.truncate_middle(result.text, self.settings.output_chars)
        result, shown = self._injected(call, code, shown, result, limit)
        self.erroneous_calls += result.error
        self._output(call, code, shown, result, executed=True)
        if result.restarted:
            self.emit(Notice(level="warning", message="the kernel was restarted; its variables were lost"))
        self._apply(await self._consult("on_tool_result", self.calls[-1]))

    def _injected(self, call: int, code: str, shown: str, result: CellResult, limit: float) -> tuple[CellResult, str]:
        """The output the model reads: the kernel's, or a fault in its place (``core.faults``),
        recorded as an Intervention right before it. The kernel keeps the state the real cell left."""
        faults = self.agent.faults
        if faults is None:
            return result, shown
        previous = next((c.output for c in reversed(self.calls) if c.executed), None)
        made = faults.fault(run_id=self.run_id, call=call, code=code, shown=shown, previous=previous, timeout_s=limit)
        if made is None:
            return result, shown
        plan, fault = made
        self.emit(
            Intervention(
                target="output",
                by=plan.by,
                turn=self.turn,
                replaced=shown,
                replacement=fault.text,
                call=call,
                fault=fault.kind,
                detail=fault.detail,
            )
        )
        if fault.kind == "wrong-number" and not fault.detail.get("applied", True):
            return result, shown
        # as the kernel reports each: a traceback as an error output, a timeout as a note, the rest as printed
        outputs = (Output(kind="error" if fault.error else "stdout", text=fault.text),) if fault.text else ()
        return (
            replace(
                result,
                outputs=() if fault.timed_out else outputs,
                notes=(fault.text,) if fault.timed_out else (),
                error=fault.error,
                timed_out=fault.timed_out,
                error_name=fault.error_name,
                duration_s=limit if fault.timed_out else result.duration_s,
            ),
            fault.text,
        )

    async def _skip_reason(self, code: str) -> str | None:
        """Text shown instead of running the block, or None to run it (budget, suspension, a guard's skip)."""
        if self.tools_suspended:
            return "The tool is unavailable: continue by reasoning step by step and give the answer in \\boxed{}."
        if sum(c.executed for c in self.calls) >= self.settings.max_tool_calls:
            if self.budget_noted:
                raise _Finish("tool_budget", self.last_attempt)
            self.budget_noted = True
            self.emit(Notice(level="warning", message=f"tool budget of {self.settings.max_tool_calls} calls reached"))
            return prompts.BUDGET_NOTE
        for v in await self._consult("on_code", code):
            if v.action == SKIP:
                return v.text
        return None

    def _output(self, call: int, code: str, shown: str, result: CellResult, *, executed: bool) -> None:
        self.emit(
            ToolResult(
                call=call,
                shown=shown,
                error=result.error,
                timed_out=result.timed_out,
                duration_s=round(result.duration_s, 4),
                outputs=[asdict(o) for o in result.outputs],
                restarted=result.restarted,
                died=result.died,
                error_name=result.error_name,
                executed=executed,
            )
        )
        code_segment = next(
            (i for i in range(len(self.context.segments) - 1, -1, -1) if self.context.segments[i].call == call), None
        )
        self.calls.append(
            Call(
                call=call,
                turn=self.turn,
                code=code,
                output=shown,
                error=result.error,
                timed_out=result.timed_out,
                executed=executed,
                segment=code_segment,
            )
        )
        self._append(prompts.output_block(shown), source="tool", kind="tool", call=call)

    def _append(self, text: str, *, source: str, kind: str = "note", call: int | None = None) -> None:
        if not self.context.ends_with_newline():
            text = "\n" + text
        elif kind == "note" and not text.endswith("\n"):
            text += "\n"
        self.emit(ContextAppended(text=text, source=source, kind=kind, call=call))
