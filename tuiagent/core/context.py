"""The working context: what the model is conditioned on next, as a list of segments (see
``tuiagent.protocol.Segment`` for their kinds).

It changes only through events: ``WorkingContext.apply`` is the one function that turns a run's
events into its context. The loop applies each event as it records it, and ``working_context``
folds a recorded trajectory through the same function, so replay shows exactly what the model
saw. Guards prune and truncate it through verdicts (ContextPruned events); the trajectory keeps
everything.
"""

from __future__ import annotations

from collections.abc import Iterable

from tuiagent.core import events as ev
from tuiagent.parsing import tool_block_start
from tuiagent.protocol import Segment


class WorkingContext:
    def __init__(self, prompt: str, mode: str = "tool"):
        self.segments: list[Segment] = [Segment("prompt", prompt)]
        self._text: str | None = prompt
        self.mode = mode
        self.turn = 0  # the last turn that ended
        self.blocks = 0  # code blocks so far (each one's call number)

    def apply(self, event: ev.Event) -> None:
        """Change the context as ``event`` says (events that do not change it are ignored)."""
        if isinstance(event, ev.TurnEnded):
            self.turn = event.turn
            end = turn_prose_end(event, self.mode)
            self.blocks += end < len(event.text)
            for segment in split_turn(event.text, event.turn, end, self.blocks):
                self.append(segment)
        elif isinstance(event, ev.ContextAppended):
            self.append(Segment(event.kind, event.text, self.turn, event.call, event.source))
        elif isinstance(event, ev.ContextPruned):
            if event.keep is not None:
                self.keep(event.keep)
            elif event.truncate_to is not None:
                self.truncate(event.truncate_to)

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = "".join(s.text for s in self.segments)
        return self._text

    def append(self, segment: Segment) -> None:
        self.segments.append(segment)
        if self._text is not None:
            self._text += segment.text

    def keep(self, indices: list[int]) -> None:
        """Keep only the segments at ``indices`` (in their order); the prompt always stays.

        Indices that name no segment are ignored: a replayed trajectory may have lost a line (and
        so a segment) before the prune.
        """
        wanted = sorted(i for i in set(indices) | {0} if 0 <= i < len(self.segments))
        self.segments = [self.segments[i] for i in wanted]
        self._text = None

    def truncate(self, length: int) -> None:
        """Drop every segment from index ``length`` on (to resample from an earlier point)."""
        self.segments = self.segments[: max(1, length)]
        self._text = None

    def ends_with_newline(self) -> bool:
        return self.text.endswith("\n")


def prose_end(text: str, stop: str, mode: str) -> int:
    """Where a turn's prose ends: where the code block that asks for a tool call starts, else at
    the end of the text. Computed once, when the turn ends (``TurnEnded.prose_end``)."""
    start = tool_block_start(text, stop, mode)
    return len(text) if start is None else start


def turn_prose_end(event: ev.TurnEnded, mode: str) -> int:
    """The turn's recorded ``prose_end``, or, for a turn recorded before it was, the same split
    computed again (``trajectory.load`` fills it in with this)."""
    return event.prose_end if event.prose_end is not None else prose_end(event.text, event.stop, mode)


def split_turn(text: str, turn: int, end: int, call: int) -> list[Segment]:
    """A generated turn as segments: its prose ``text[:end]``, then (when it asks for a tool call)
    its code block, the rest.

    The loop and the replay fold both use this, so a working context rebuilt from a
    trajectory has the same segments the model saw.
    """
    prose, code = text[:end], text[end:]
    return ([Segment("model", prose, turn)] if prose else []) + ([Segment("code", code, turn, call)] if code else [])


def working_context(events: Iterable[ev.Event]) -> WorkingContext | None:
    """The context the model would be given next, after the given events (None before RunStarted)."""
    context = None
    for e in events:
        if isinstance(e, ev.RunStarted):
            context = WorkingContext(e.prompt, e.mode)
        elif context is not None:
            context.apply(e)
    return context
