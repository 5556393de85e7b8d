"""Token confidence, headless: where each generated token sits in a turn's text and how sure the
model was of it (its recorded log-probability as p), in bands the app and the exports shade alike.

Only tokens the model was less than 90% sure of are shaded (most tokens of a small model are near
certain: shading them all would hide the few that matter), in three bands; the bands are ours,
chosen so that ATTC's default threshold (a block's mean confidence of 0.97) sits above the palest.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field

from tuiagent.core import events as ev
from tuiagent.mathtext import Piece

# Upper bounds of p for the bands, least sure first (ours, see the docstring).
BAND_LIMITS: tuple[float, ...] = (0.3, 0.6, 0.9)


def band(p: float) -> int | None:
    """The index of p's band (0: least sure), or None when p is not shaded."""
    for i, upper in enumerate(BAND_LIMITS):
        if p < upper:
            return i
    return None


def legend() -> str:
    """The bands, in words."""
    return " / ".join(f"p<{upper:g}" for upper in BAND_LIMITS)


@dataclass
class TokenSpans:
    """Where each token of a text starts and ends (character offsets) and its probability."""

    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    probs: list[float | None] = field(default_factory=list)

    @property
    def length(self) -> int:
        return self.ends[-1] if self.ends else 0

    def append(self, text: str, logprob: float | None) -> None:
        start = self.length
        self.starts.append(start)
        self.ends.append(start + len(text))
        self.probs.append(None if logprob is None else math.exp(logprob))

    def window(self, start: int, end: int) -> TokenSpans:
        """The tokens over text[start:end], with offsets from ``start`` (clipped at both ends)."""
        out = TokenSpans()
        for i in range(bisect_right(self.ends, start), len(self.starts)):
            if self.starts[i] >= end:
                break
            out.starts.append(max(self.starts[i], start) - start)
            out.ends.append(min(self.ends[i], end) - start)
            out.probs.append(self.probs[i])
        return out

    def through(self, pieces: list[Piece]) -> TokenSpans:
        """The tokens over the rendered text of ``pieces`` (``tuiagent.mathtext``; the tokens are
        over their source): text shown as written keeps its tokens, shifted; a rendered math span
        becomes one token, as sure as the least sure token it came from."""
        out = TokenSpans()
        shift = 0  # rendered offset minus source offset, at the current piece
        for piece in pieces:
            inside = self.window(piece.start, piece.end)
            if piece.math:
                known = [p for p in inside.probs if p is not None]
                if inside.starts:
                    out.starts.append(piece.start + shift)
                    out.ends.append(piece.start + shift + len(piece.text))
                    out.probs.append(min(known) if known else None)
            else:
                out.starts += [s + piece.start + shift for s in inside.starts]
                out.ends += [e + piece.start + shift for e in inside.ends]
                out.probs += inside.probs
            shift += len(piece.text) - (piece.end - piece.start)
        return out

    def lowest(self, text: str) -> tuple[str, float] | None:
        """The token the model was least sure of, and its probability."""
        known = [(p, i) for i, p in enumerate(self.probs) if p is not None]
        if not known:
            return None
        p, i = min(known)
        return text[self.starts[i] : self.ends[i]], p


def turn_tokens(events: Iterable[ev.Event]) -> dict[int, TokenSpans]:
    """Turn -> its tokens, from a run's recorded TokenDelta events."""
    out: dict[int, TokenSpans] = {}
    for e in events:
        if isinstance(e, ev.TokenDelta):
            out.setdefault(e.turn, TokenSpans()).append(e.text, e.logprob)
    return out
