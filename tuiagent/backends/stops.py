"""Stop-string detection over a token stream, for backends that sample token by token."""

from __future__ import annotations

from collections.abc import Sequence

from tuiagent.backends.base import Token


class StopMatcher:
    """Holds back tokens that might begin a stop string; reports when one is complete.

    ``feed`` returns the tokens that are now safe to emit. Once a stop string is
    complete, ``stopped`` is true and the text before it has been emitted (a
    token that is cut keeps its log-probability on the first piece only); the
    stop string itself is never emitted.
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
            return self._take_chars(min(hits))
        return self._take_chars(len(text) - self._held_suffix(text))

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

    def _take_chars(self, n: int) -> list[Token]:
        """Emit the first ``n`` characters of the pending tokens, keeping the rest pending."""
        out: list[Token] = []
        while self._pending and n > 0:
            tok = self._pending[0]
            if len(tok.text) <= n:
                out.append(self._pending.pop(0))
                n -= len(tok.text)
            else:
                out.append(Token(tok.text[:n], tok.logprob))
                # The remainder is the same sampled token: its log-probability was already counted.
                self._pending[0] = Token(tok.text[n:], None)
                n = 0
        return out
