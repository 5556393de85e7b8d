"""A readable transcript of a run, for the terminal: streamed live by `solve`, re-read by `replay --print`.

Everything shown goes through ``tuiagent.safetext.for_terminal``, and the model's math is rendered
(``tuiagent.mathtext``; ``math=False``: as written); the trajectory keeps it verbatim."""

from __future__ import annotations

import json
from typing import Any, TextIO

from rich.console import Console
from rich.text import Text

from tuiagent.core import events as ev
from tuiagent.mathtext import MathStream, render_latex, render_math
from tuiagent.protocol import budget_words
from tuiagent.safetext import for_terminal, terminal_console

_STYLE = {"info": "cyan", "warning": "yellow", "error": "bold red"}
ECHO_CHARS = 200  # [ours] the most of a problem the header shows; the trajectory and --json keep it whole


def echo(problem: str, chars: int) -> str:
    """The problem as the header shows it: whole, or its start and its length (``chars``, as given)."""
    if len(problem) <= ECHO_CHARS:
        return problem
    return f"{problem[:ECHO_CHARS].rstrip()}… ({chars:,} chars)"


def _text(text: str, style: str = "") -> Text:
    """A line of the transcript; what came from a problem, model, kernel or file is shown inert."""
    return Text(for_terminal(text), style=style)


class TranscriptPrinter:
    """Prints events as they come: reasoning and code as generated (a line at a time while its math
    renders), outputs, answer and summary."""

    def __init__(self, console: Console | None = None, *, math: bool = True):
        self.console = console or terminal_console(highlight=False, soft_wrap=True)
        self.math = math
        self._turn = MathStream(render=math)
        self._guards_on = 0
        self._injected: dict[int, str] = {}  # call -> the fault its output carries

    def _write(self, text: str) -> None:
        if text:
            self.console.file.write(for_terminal(text))
            self.console.file.flush()

    def __call__(self, event: ev.Event) -> None:
        c = self.console
        if isinstance(event, (ev.TurnEnded, ev.TurnStarted, ev.RunFinished)):  # the turn is over: what it held back
            self._write(self._turn.end())
        match event:
            case ev.RunStarted():
                problem = render_math(event.problem) if self.math else event.problem
                c.print(_text(f"problem: {echo(problem, len(event.problem))}", style="bold"))
                tool = event.settings.get("tool", "python")
                mode = event.mode if tool == "python" or event.mode == "cot" else f"{event.mode}, tool: {tool}"
                if event.mode == "tool" and event.settings.get("first_call", "free") != "free":
                    mode += f", first call: {event.settings['first_call']}"
                c.print(_text(f"model: {event.model_id} ({event.backend}), mode: {mode}", style="dim"))
                c.print(Text(f"budgets: {budget_words(event.settings)}", style="dim"))
            case ev.TurnStarted():
                if event.turn == 1 and not self._guards_on:
                    c.print(_text("guards: none", style="dim"))
                c.print(_text(f"\n── turn {event.turn} · {event.context_tokens} context tokens", style="dim"))
            case ev.TokenDelta():
                self._write(self._turn.feed(event.text))
            case ev.TurnEnded() if event.text and not event.text.endswith("\n"):
                c.file.write("\n")
            case ev.ToolResult():
                style = "red" if event.error else ("green" if event.executed else "yellow")
                label = "timed out" if event.timed_out else ("error" if event.error else "ok")
                status = f"{label}, {event.duration_s * 1000:.0f} ms" if event.executed else "not run"
                if event.call in self._injected:
                    status += f", injected: {self._injected[event.call]}"
                c.print(_text(f"```output  [call {event.call}: {status}]", style=style))
                if event.shown:
                    c.print(_text(event.shown), style=style)
                c.print(_text("```", style=style))
            case ev.Intervention() if event.target == "output" and event.fault:
                if event.call is not None:
                    self._injected[event.call] = event.fault
                c.print(_text(f"[injected by {event.by}] {intervention_line(event)}", style="bold yellow"))
            case ev.ContextAppended() if event.source != "tool":
                c.print(_text(event.text.rstrip(), style="magenta"))
            case ev.GuardVerdict() if event.action != "pass":
                c.print(
                    _text(f"[{event.guard}] {event.action}: {event.reason or _numbers(event.data)}", style="magenta")
                )
            case ev.GuardToggled() if event.reason == "on at start":  # the header: every guard in force
                self._guards_on += 1
                values = " ".join(f"{k}={v}" for k, v in event.settings.items())
                c.print(_text(f"guard {event.guard} on: {values}", style="dim"))
            case ev.GuardToggled() if event.reason:
                state = "on" if event.enabled else "off"
                c.print(_text(f"[{event.guard}] {state}: {event.reason}", style="yellow"))
            case ev.ContextPruned():
                c.print(
                    _text(
                        f"[{event.guard}] pruned {len(event.removed_text)} characters from the working context",
                        style="magenta",
                    )
                )
            case ev.Notice():
                c.print(_text(f"[{event.level}] {event.message}", style=_STYLE.get(event.level, "")))
            case ev.Intervention():
                c.print(_text(intervention_line(event), style="bold yellow"))
            case ev.RunFinished():
                self._summary(event)

    def _summary(self, event: ev.RunFinished) -> None:
        verdict = {True: ("right", "bold green"), False: ("wrong", "bold red"), None: ("", "")}[event.correct]
        line = _text("\nanswer: ", style="bold")
        answer = None if event.answer is None else render_latex(event.answer) if self.math else event.answer
        line.append(for_terminal(answer) if answer is not None else "(none)", style="bold")
        if verdict[0]:
            line.append(f"  [{verdict[0]}]", style=verdict[1])
        self.console.print(line)
        self.console.print(
            _text(
                f"ended: {event.reason} · {event.tool_calls} tool call{'s' * (event.tool_calls != 1)} ({event.erroneous_calls} erroneous) · "
                f"{event.generated_tokens} generated tokens · {event.context_tokens} context tokens · "
                f"{event.wall_s:.1f} s",
                style="dim",
            )
        )
        if event.trajectory:
            self.console.print(_text(f"trajectory: {event.trajectory}", style="dim"))


def fault_line(event: ev.Intervention) -> str:
    """What an injected fault did, in a line."""
    d = event.detail
    where = f"call {event.call}" if event.call is not None else f"turn {event.turn}"
    if event.fault == "wrong-number":
        what = f"{d.get('old')} -> {d.get('new')}" if d.get("applied", True) else "no number in the output: unchanged"
    elif event.fault == "error":
        what = f"{d.get('exception')} at line {d.get('line')}"
    elif event.fault == "timeout":
        what = f"reported as timed out after {d.get('timeout_s', 0):g} s"
    elif event.fault == "stale":
        what = "the previous output repeated" if d.get("previous") else "no previous output: shown empty"
    else:
        what = "the output emptied"
    again = " (the same code again: broken tool)" if d.get("repeat") else ""
    return f"{event.fault} at {where}: {what}{again}"


def intervention_line(e: ev.Intervention) -> str:
    """An Intervention in one line: what an injected fault did, or what an edit replaced, where, by
    whom, and by what."""
    if e.fault:
        return fault_line(e)
    if e.target == "text":
        what = f"text of step {e.turn} from token {e.token}"
        by_what = f"then {_quote(e.replacement)}" if e.replacement else "nothing added"
    else:
        what = f"{e.target} of call {e.call} (step {e.turn})"
        by_what = f"now {_quote(e.replacement)}"
    return f"[edit] {what} replaced by a {e.by}: was {_quote(e.replaced)}, {by_what}"


def _quote(text: str, limit: int = 60) -> str:
    one = " ".join(text.split())
    return repr(one if len(one) <= limit else one[: limit - 1] + "…")


def _numbers(data: dict[str, Any]) -> str:
    """The short numeric facts of a verdict, for one transcript line."""
    return ", ".join(
        f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in data.items()
        if isinstance(v, (int, float, str)) and len(str(v)) < 40
    )


class JsonPrinter:
    """One JSON object per event, for scripts (``--json``)."""

    def __init__(self, out: TextIO):
        self.out = out

    def __call__(self, event: ev.Event) -> None:
        self.out.write(json.dumps(ev.to_dict(event), ensure_ascii=False) + "\n")
        self.out.flush()
