"""Stop-string detection over a token stream, for backends that sample token by token."""

from __future__ import annotations

from collections.abc import Sequence

from tuiagent.protocol import Token


class StopMatcher:
    """Holds back tokens that might begin a stop string; reports when one is complete.

    ``feed`` returns the tokens that are now safe to emit, each whole, so that every token out
    is one sampled token with its log-probability (a token is held back whole while its end might
    begin a stop string). Once a stop string is complete, ``stopped`` is true and the text before
    it has been emitted: the token that the stop string starts in is cut, keeping its
    log-probability; the stop string itself is never emitted.
    """

    def __init__(self, stops: Sequence[str]):
        self.stops = [s for s in stops if s]
        self.stopped = False
        self._pending: list[Token] = []

    def feed(self, token: Token) -> list[Token]:
        if self.stopped:
            return []
        self._pending.append(token)
        text = "".join(t.text for t in self._pending)
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.stopped = True
            at = min(hits)
            out = self._take_whole(at)
            cut = at - sum(len(t.text) for t in out)
            if cut:  # the token the stop string starts in: its text before the stop
                out.append(Token(self._pending[0].text[:cut], self._pending[0].logprob))
            self._pending = []
            return out
        return self._take_whole(len(text) - self._held_suffix(text))

    def flush(self) -> list[Token]:
        """At end of generation, whatever was held back is plain text."""
        out, self._pending = self._pending, []
        return out if not self.stopped else []

    def _held_suffix(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that is a proper prefix of a stop string."""
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:n]):
                    best = n
                    break
        return best

    def _take_whole(self, n: int) -> list[Token]:
        """Emit the pending tokens that lie entirely within the first ``n`` characters."""
        out: list[Token] = []
        while self._pending and len(self._pending[0].text) <= n:
            n -= len(self._pending[0].text)
            out.append(self._pending.pop(0))
        return out
