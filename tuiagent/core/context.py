"""The working context: what the model is conditioned on next, as a list of segments.

Guards prune and truncate it through verdicts; the trajectory keeps everything.
Segment kinds: "prompt" (the rendered chat template), "model" (generated prose),
"code" (a generated ```python block through its closing fence), "tool" (an
```output block), "note" (text the loop or a guard appended to the assistant's turn).
"""

from __future__ import annotations

from tuiagent.protocol import Segment


class WorkingContext:
    def __init__(self, prompt: str):
        self.segments: list[Segment] = [Segment("prompt", prompt)]
        self._text: str | None = prompt

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


def split_turn(text: str, turn: int, code_start: int | None, call: int) -> list[Segment]:
    """A generated turn as segments: its prose, then (when it asks for a tool call) its code block.

    The loop and the replay fold both use this, so a working context rebuilt from a
    trajectory has the same segments the model saw.
    """
    if code_start is None:
        return [Segment("model", text, turn)] if text else []
    prose, code = text[:code_start], text[code_start:]
    return ([Segment("model", prose, turn)] if prose else []) + [Segment("code", code, turn, call)]
