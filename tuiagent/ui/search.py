"""Search from the command palette (ctrl+p): within the run on the replay screen (text, code,
outputs, guard verdicts: a hit jumps to that event) and across saved runs (problem, answer, model,
guards, right/wrong: a hit opens the run). Plain substring matching, every word of the query."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING

from textual.command import Hit, Hits, Provider
from textual.content import Content

from tuiagent.core import events as ev
from tuiagent.runs import RunInfo, recent_runs
from tuiagent.ui.describe import describe_event
from tuiagent.ui.messages import OpenReplay
from tuiagent.ui.run_screen import ReplayedRun

if TYPE_CHECKING:
    from tuiagent.ui.host import HostApp

# Hits shown per provider at most (ours: more would not be read in a palette).
MAX_HITS = 40


def searchable(e: ev.Event) -> str:
    """The text of an event a search looks in."""
    match e:
        case ev.TurnEnded():
            return e.text
        case ev.CodeBlock():
            return e.code
        case ev.ToolResult():
            return e.shown
        case ev.GuardVerdict():
            return f"{e.guard} {e.action} {e.reason} {describe_event(e)}"
        case ev.ContextAppended():
            return e.text
        case ev.Notice():
            return e.message
        case ev.AnswerAttempt():
            return f"answer {e.answer}"
    return ""


def _snippet(text: str, word: str, width: int = 60) -> str:
    at = max(text.lower().find(word), 0)
    start = max(0, at - width // 3)
    piece = " ".join(text[start : start + width].split())
    return ("…" if start else "") + piece + ("…" if start + width < len(text) else "")


def event_hits(events: list[ev.Event], query: str) -> Iterator[tuple[int, str]]:
    """(index, one line) of each event whose text holds every word of ``query``."""
    words = query.lower().split()
    if not words:
        return
    turn = 0
    for i, e in enumerate(events):
        if isinstance(e, ev.TurnStarted):
            turn = e.turn
        text = searchable(e)
        low = text.lower()
        if text and all(w in low for w in words):
            yield i, f"turn {turn} · {e.type} · {_snippet(text, words[0])}"


class RunSearch(Provider):
    """Within the run on the replay screen."""

    async def search(self, query: str) -> Hits:
        screen = self.screen
        if not isinstance(screen, ReplayedRun) or not screen.events:
            return
        for n, (i, line) in enumerate(event_hits(screen.events, query)):
            if n >= MAX_HITS:
                break
            yield Hit(
                0.9,
                Content.assemble(("in this run · ", "$text-muted"), line),
                lambda i=i: screen.go(i + 1),
                help="jump to this event",
            )


class SavedRunsSearch(Provider):
    """Across the saved runs (read once, when the palette opens, in a thread)."""

    if TYPE_CHECKING:  # the app this runs in (textual types it App[object])

        @property
        def app(self) -> HostApp: ...

    async def startup(self) -> None:
        self.runs: list[RunInfo] = await asyncio.to_thread(recent_runs)

    async def search(self, query: str) -> Hits:
        if not query.strip():
            return
        app = self.app
        n = 0
        for info in self.runs:
            if not info.matches(query):
                continue
            mark = {"right": " ✓", "wrong": " ✗"}.get(info.result, "")
            line = f"{info.when} · {info.problem[:50]} · {info.answer or info.reason}{mark} · {info.guards}"
            yield Hit(
                0.5,
                Content.assemble(("saved run · ", "$text-muted"), line),
                lambda path=info.path: app.post_message(OpenReplay(path)),
                help=f"replay {info.path.name}",
            )
            n += 1
            if n >= MAX_HITS:
                break
