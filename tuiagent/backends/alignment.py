"""Tokens from engines that report text and tokens apart, without the model's tokenizer at hand.

``TokenAligner`` pairs the text a server or engine streams with its per-token report (names and
log-probabilities), which may run ahead of the text (vLLM holds back text that might begin a
stop string) or name tokens by their bytes. ``estimate_tokens`` counts tokens roughly where no
tokenizer is available. Used by the ``openai`` and ``vllm`` backends.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tuiagent.protocol import Token


class TokenAligner:
    """Pairs a server's streamed text with its per-token report (names and log-probabilities).

    The text is authoritative: what is emitted is exactly the text the server sent, nothing
    dropped, nothing added. The tokens come with names (``logprobs.tokens`` on a server, each
    ``Logprob.decoded_token`` in vLLM) and the two streams need not be in step: a server that
    checks stop strings holds text back while it sends the tokens that made it, and the text of
    a character split across tokens comes with the token that completes it. So tokens wait here
    until their text has arrived. Where a token's name is not its text (byte pieces, replacement
    characters) the text up to the next token whose name is found in it goes to the first
    token, and the others keep their log-probabilities with empty text: sums and counts stay
    exact. At the end (``finish``), tokens past the end of the text (the stop string a server
    cut, an end-of-sequence token) are dropped; one that straddles the end is cut.
    """

    def __init__(self) -> None:
        self._text = ""
        self._tokens: list[tuple[str, float | None]] = []

    def feed(
        self, text: str, names: Sequence[str] | None, logprobs: Sequence[float | None] | None = None
    ) -> list[Token]:
        """Add one streamed delta; return the tokens whose text is now known."""
        if names is None:  # no per-token report: the text is one token of unknown probability
            if not self._tokens:
                return [Token(text, None)] if text else []
            names, logprobs = [], []
        lps = list(logprobs or [])
        lps += [None] * (len(names) - len(lps))
        self._text += text
        self._tokens += zip(names, lps)
        return self._drain(final=False)

    def finish(self) -> list[Token]:
        """The stream ended: settle what is left."""
        out = self._drain(final=True)
        if self._text:
            out.append(Token(self._text, None))
            self._text = ""
        return out

    def _drain(self, final: bool) -> list[Token]:
        out: list[Token] = []
        while self._tokens:
            name, lp = self._tokens[0]
            if name and self._text.startswith(name) or not name and (self._text or not final):
                out.append(Token(name, lp))
                self._text = self._text[len(name) :]
                del self._tokens[0]
                continue
            if name.startswith(self._text):
                if not final:
                    break  # its text has not all arrived yet
                if self._text:
                    out.append(Token(self._text, lp))
                    self._text = ""
                self._tokens.clear()  # past the end of the text: a cut stop string, end of sequence
                break
            # The name is not the text: resynchronise on the next token whose name is found in it.
            for j in range(1, len(self._tokens)):
                following = self._tokens[j][0]
                if following and "\ufffd" not in following:
                    at = self._text.find(following, 1)
                    if at > 0:
                        break
            else:
                j, at = len(self._tokens), -1
            if at < 0:
                if not final:
                    break  # wait for more text or tokens
                j, at = len(self._tokens), len(self._text)
            out.append(Token(self._text[:at], lp))
            out.extend(Token("", p) for _, p in self._tokens[1:j])
            self._text = self._text[at:]
            del self._tokens[:j]
        return out


_PIECES = re.compile(r"'(?:s|t|re|ve|m|ll|d)| ?[^\W\d_]+| ?\d{1,3}| ?[^\s\w]+|\s+(?!\S)|\s+|_+")


def estimate_tokens(text: str) -> int:
    """A rough count without any tokenizer data: cl100k-like pre-token pieces, long words split."""
    return sum(1 + len(p.strip()) // 6 for p in _PIECES.findall(text))
