"""One line under the trajectory: tokens, tokens/s, tool calls, context tokens, elapsed time, state."""

from __future__ import annotations

import time
from collections import deque

from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from tuiagent.core import events as ev
from tuiagent.runner import SANDBOX_NOTICE


class StatusLine(Widget):
    DEFAULT_CSS = """
    StatusLine { height: 1; padding: 0 1; background: $panel; color: $text; }
    """

    state: reactive[str] = reactive("idle")

    def __init__(self, *, id: str | None = None):
        super().__init__(id=id)
        self.sandbox = ""  # the kernel sandbox level in force (kept across runs)
        self.reset()

    def reset(self) -> None:
        self.tokens = 0
        self.tool_calls = 0
        self.errors = 0
        self.context_tokens = 0
        self.started: float | None = None
        self.ended: float | None = None
        self._stamps: deque[float] = deque(maxlen=64)
        self._last_rate = 0.0

    def on_mount(self) -> None:
        self._timer = self.set_interval(0.25, self.refresh, pause=True)

    # -- calls down -----------------------------------------------------------------------------

    def begin(self) -> None:
        self.reset()
        self.started = time.monotonic()
        self.state = "running"
        self._timer.resume()

    def end(self, state: str) -> None:
        self.ended = time.monotonic()
        self.state = state
        self._timer.pause()
        self.refresh()

    def wait(self, waiting: bool) -> None:
        """A code block waits for the user's yes or no: shown as waiting; the rate restarts after it
        (tokens before the wait are not averaged with tokens after it)."""
        if self.state not in ("running", "waiting"):
            return
        self.state = "waiting" if waiting else "running"
        if not waiting:
            self._stamps.clear()

    def observe(self, e: ev.Event) -> None:
        """Count an event (cheap: called for every token)."""
        if isinstance(e, ev.TokenDelta):
            self.tokens += 1
            self._stamps.append(time.monotonic())
        elif isinstance(e, ev.TurnStarted):
            # the rate is the streaming turn's: not averaged over the tool's time between turns, nor
            # over a fork's turns taken over from its parent (they arrive all at once)
            self.context_tokens = e.context_tokens
            self._stamps.clear()
        elif isinstance(e, ev.ToolResult) and e.executed:
            self.tool_calls += 1
            self.errors += e.error or e.timed_out
        elif isinstance(e, ev.Notice) and e.message.startswith(SANDBOX_NOTICE):
            self.sandbox = e.message[len(SANDBOX_NOTICE) :].split(" ", 1)[0]
        elif isinstance(e, ev.RunFinished):
            self.tokens, self.tool_calls, self.errors = e.generated_tokens, e.tool_calls, e.erroneous_calls
            self.context_tokens = e.context_tokens

    def show_run(self, events: list[ev.Event]) -> None:
        """The final numbers of a saved run (replay)."""
        self.reset()
        for e in events:
            self.observe(e)
        fin = next((e for e in reversed(events) if isinstance(e, ev.RunFinished)), None)
        self._stamps.clear()
        self.started, self.ended = 0.0, (fin.wall_s if fin else 0.0)
        self._last_rate = self.tokens / fin.wall_s if fin and fin.wall_s else 0.0
        self.state = fin.reason if fin else "incomplete"
        self.refresh()

    # -- drawing --------------------------------------------------------------------------------

    def rate(self) -> float:
        s = self._stamps
        now = time.monotonic()
        if len(s) >= 2 and now - s[-1] < 1.0:
            self._last_rate = (len(s) - 1) / max(s[-1] - s[0], 1e-6)
        return self._last_rate

    def elapsed(self) -> float:
        if self.started is None:
            return 0.0
        return (self.ended if self.ended is not None else time.monotonic()) - self.started

    def render(self) -> Content:
        e = int(self.elapsed())
        state_style = {
            "running": "bold $text-accent",
            "waiting": "bold $text-warning",
            "answer": "bold $text-success",
            "cancelled": "bold $text-warning",
            "error": "bold $text-error",
            "backend_crashed": "bold $text-error",
            "kernel_failed": "bold $text-error",
        }.get(self.state, "bold")
        sep = ("  ", "")
        line = Content.assemble(
            (self.state, state_style),
            sep,
            (str(self.tokens), "bold"),
            (" tok", "$text-muted"),
            sep,
            (f"{self.rate():.1f}", "bold"),
            (" tok/s", "$text-muted"),
            sep,
            (str(self.tool_calls), "bold"),
            (" calls", "$text-muted"),
            (f" ({self.errors} err)" if self.errors else "", "$text-error"),
            sep,
            ("ctx ", "$text-muted"),
            (str(self.context_tokens), "bold"),
            (" tok", "$text-muted"),
            sep,
            ("time ", "$text-muted"),
            (f"{e // 60:02d}:{e % 60:02d}", "bold"),
        )
        if not self.sandbox:
            return line
        room = self.size.width - line.cell_length - 2  # the level always; its label when it fits
        label = "sandbox " if room >= len("sandbox " + self.sandbox) else ""
        return Content.assemble(line, "  ", (label, "$text-muted"), (self.sandbox, "bold"))
