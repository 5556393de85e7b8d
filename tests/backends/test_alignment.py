"""TokenAligner: a server's (or vLLM's) streamed text paired with its per-token report."""

from __future__ import annotations

from tuiagent.backends.alignment import TokenAligner
from tuiagent.protocol import Token


def _aligned(*deltas, final=True):
    aligner = TokenAligner()
    out = [t for text, names, lps in deltas for t in aligner.feed(text, names, lps)]
    return out + (aligner.finish() if final else [])


def test_aligner_pairs_text_with_tokens():
    assert _aligned(("ab c", ["ab", " c"], [-0.1, -0.2])) == [Token("ab", -0.1), Token(" c", -0.2)]
    assert _aligned(("x", None, None)) == [Token("x", None)]
    # No logprobs at all: the text is passed on as it comes.
    assert _aligned(("x", None, None), ("", None, None)) == [Token("x", None)]


def test_aligner_waits_for_text_a_server_holds_back():
    # vLLM holds back text that might start a stop string but sends the tokens at once.
    deltas = [("ab", ["ab", "``"], [-0.1, -0.2]), ("", ["`o"], [-0.3]), ("```o", ["k"], [-0.4])]
    assert _aligned(*deltas[:2], final=False) == [Token("ab", -0.1)]
    assert _aligned(*deltas, ("k", [], None)) == [
        Token("ab", -0.1),
        Token("``", -0.2),
        Token("`o", -0.3),
        Token("k", -0.4),
    ]


def test_aligner_drops_what_lies_past_a_cut_stop_string():
    # The server cut its text at a stop string: the straddling token is cut, the rest dropped.
    assert _aligned(("ab ", ["ab", " c", "d"], [-0.1, -0.2, -0.3])) == [Token("ab", -0.1), Token(" ", -0.2)]
    assert _aligned(("", ["```"], [-0.1])) == []
    # An end-of-sequence token whose name is not in the text.
    assert _aligned(("hi", ["hi", "<|im_end|>"], [-0.1, -0.2])) == [Token("hi", -0.1)]


def test_aligner_keeps_every_logprob_when_names_are_not_text():
    # A character split over byte tokens: the text comes with the last of them.
    deltas = [("", ["\ufffd"], [-0.1]), ("é", ["\ufffd"], [-0.2]), ("s", ["s"], [-0.3])]
    assert _aligned(*deltas) == [Token("é", -0.1), Token("", -0.2), Token("s", -0.3)]
    # Byte-level names that never match: the text goes to the first, the logprobs stay.
    assert _aligned(("é", ["bytes:\\xc3", "bytes:\\xa9"], [-0.1, -0.2])) == [Token("é", -0.1), Token("", -0.2)]
    # llama-cpp-python drops the bytes of a split character from text and names alike.
    assert _aligned(("", [""], [-0.1]), ("a", ["a"], [-0.2])) == [Token("", -0.1), Token("a", -0.2)]
