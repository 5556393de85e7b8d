"""Property tests for reading model output: code fences, boxed answers, stop strings in a token
stream, and llama.cpp token bytes that split UTF-8 characters. Model text is input: any of it,
cut into tokens anywhere, must parse without raising, in linear time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuiagent.backends.llama_model import PieceDecoder
from tuiagent.backends.stops import StopMatcher
from tuiagent.parsing import (
    CODE_OPEN,
    OUTPUT_FENCE,
    boxed_answers,
    closed_blocks,
    final_answer,
    last_closed_block,
    tool_block_start,
)
from tuiagent.protocol import Token

FAST = settings(max_examples=150, deadline=None)

# Text a model writes around fences and answers: no backticks, braces or backslashes of its own.
PROSE = st.text(st.characters(exclude_characters="`{}\\"), max_size=20)
# Code may hold braces, newlines and any character but a backtick.
CODE = st.text(st.characters(exclude_characters="`"), max_size=30)
# The rest of an opening fence line (```python3, ```python {run}).
HEADER = st.text(st.characters(exclude_characters="`\n"), max_size=8)
# Pieces that make fences and answers, to build adversarial text from.
FRAGMENTS = [
    "```",
    "```python",
    "```python\n",
    "````",
    "```output",
    "\n",
    "`",
    "python",
    "\\boxed{",
    "\\fbox {",
    "{",
    "}",
    "\\frac{1}{2}",
    "42",
    " ",
    "x",
    "é",
    "😀",
    "\u2028",
    "\x85",
    "\r\n",
]
NOISY = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), max_size=30).map("".join)


@st.composite
def balanced(draw, depth: int = 2) -> str:
    """Answer text whose braces are balanced, e.g. ``\\frac{1}{2}`` or ``{a{b}}``."""
    parts = draw(st.lists(PROSE | (st.just(None) if depth else st.nothing()), max_size=3))
    return "".join(p if p is not None else "{" + draw(balanced(depth - 1)) + "}" for p in parts)


def chunked(data: str | bytes, cuts: list[int]) -> list:
    """Text or bytes cut at the given positions, as a token stream (empty pieces allowed)."""
    bounds = [0, *sorted(min(c, len(data)) for c in cuts), len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


# -- code fences --------------------------------------------------------------------------------


@FAST
@given(st.lists(st.tuples(PROSE, HEADER, CODE), max_size=4), PROSE, st.none() | CODE)
def test_every_closed_block_is_found_and_an_unclosed_one_is_not(blocks, tail, unclosed):
    text = "".join(f"{prose}{CODE_OPEN}{header}\n{code}\n```\n" for prose, header, code in blocks) + tail
    if unclosed is not None:
        text += f"{CODE_OPEN}\n{unclosed}"
    found = list(closed_blocks(text))
    assert [b.code for b in found] == [code for _, _, code in blocks]
    for b, (_, header, code) in zip(found, blocks):
        assert text[b.start : b.end] == f"{CODE_OPEN}{header}\n{code}\n```"
    assert last_closed_block(text) == (found[-1] if found else None)


@FAST
@given(NOISY)
def test_any_text_parses_and_spans_cover_their_fences(text):
    found = list(closed_blocks(text))
    for before, b in zip([None, *found], found):
        assert before is None or before.end <= b.start  # in order, never overlapping
        assert text.startswith(CODE_OPEN, b.start) and text[: b.end].endswith("```")
        assert b.code in text[b.start : b.end]
    for stop in ("stop", "eos", "length", "cancelled"):
        start = tool_block_start(text, stop, "tool")
        assert start is None or start in [b.start for b in found]
        assert tool_block_start(text, stop, "cot") is None


def test_a_fence_split_across_lines_or_words_is_not_a_block():
    assert last_closed_block("```py\nthon\nx = 1\n```") is None
    assert last_closed_block("```python x = 1```") is None  # the opening line never ends
    assert last_closed_block("```python\nx = '```python'\n```").code == "x = '```python'"  # not closed by ```python
    assert last_closed_block("```python\nx = 1````").code == "x = 1"  # four backticks close it


# -- boxed answers ------------------------------------------------------------------------------


@FAST
@given(st.lists(st.tuples(PROSE, balanced()), max_size=4), PROSE, st.none() | PROSE)
def test_last_balanced_boxed_wins_and_an_unclosed_one_is_skipped(answers, tail, unclosed):
    text = "".join(f"{prose}\\boxed{{{answer}}}" for prose, answer in answers) + tail
    if unclosed is not None:
        text += "\\boxed{" + unclosed
    assert boxed_answers(text) == [answer.strip() for _, answer in answers]
    assert final_answer(text) == (answers[-1][1].strip() if answers else None)


@FAST
@given(NOISY)
def test_boxed_answers_of_any_text_are_balanced(text):
    for answer in boxed_answers(text):
        depth = 0
        for ch in answer:
            depth += {"{": 1, "}": -1}.get(ch, 0)
            assert depth >= 0
        assert depth == 0
    assert final_answer(text) == (boxed_answers(text) or [None])[-1]


def test_boxed_edge_cases():
    assert boxed_answers("\\boxed{}") == [""]
    assert final_answer("\\boxed{\\boxed{1}}") == "1"  # nested: the inner one starts last
    assert boxed_answers("} \\boxed{a}} {") == ["a"]
    assert final_answer("\\boxed{1} and \\boxed{2") == "1"
    assert final_answer("no answer here") is None


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "text",
    [
        (CODE_OPEN + "\n") * 100_000,  # a megabyte of fences, none closed
        "\\boxed{" * 150_000 + "\\boxed{7}",  # a megabyte of unclosed answers, then a good one
        "\\boxed{" + "{" * 1_000_000,
    ],
)
def test_enormous_adversarial_turns_parse_in_linear_time(text):
    """Fences and boxed answers used to be matched in quadratic time: one to two minutes per 100 kB."""
    assert last_closed_block(text) is None
    assert final_answer(text) == ("7" if text.endswith("{7}") else None)


# -- stop strings over a token stream -----------------------------------------------------------


def expected_stream(pieces: list[str], stops: list[str]) -> tuple[str, bool]:
    """What a streaming stop should give: the text up to the first stop string that appears while
    the tokens come in (earliest start among those present then), and whether it stopped."""
    text = ""
    for piece in pieces:
        text += piece
        hits = [text.find(s) for s in stops if s and s in text]
        if hits:
            return text[: min(hits)], True
    return text, False


def run_matcher(matcher: StopMatcher, tokens: list[Token]) -> list[Token]:
    out: list[Token] = []
    for token in tokens:
        out += matcher.feed(token)
    return out + matcher.flush()


STOP_TEXT = st.lists(
    st.sampled_from(["```", "`", "``output", OUTPUT_FENCE, "out", "put", "\n", "a", "é"]), max_size=12
).map("".join)
STOPS = st.just([OUTPUT_FENCE]) | st.lists(st.text("`aout\n", max_size=4), max_size=3)


@FAST
@given(STOP_TEXT, st.lists(st.integers(0, 60), max_size=12), STOPS)
def test_stop_matcher_cuts_at_the_first_stop_whatever_the_chunking(text, cuts, stops):
    pieces = chunked(text, cuts)
    tokens = [Token(p, -float(i + 1)) for i, p in enumerate(pieces)]
    matcher = StopMatcher(stops)
    out = run_matcher(matcher, tokens)
    expected, stopped = expected_stream(pieces, stops)
    assert "".join(t.text for t in out) == expected
    assert matcher.stopped == stopped
    # One token out per sampled token, with its log-probability: only the token the stop cuts is cut.
    if out:
        assert out[:-1] == tokens[: len(out) - 1]
        last, fed = out[-1], tokens[len(out) - 1]
        assert last == fed or (stopped and fed.text.startswith(last.text) and last.logprob == fed.logprob)
    if not stopped:
        assert out == tokens


# -- llama.cpp token bytes -> text --------------------------------------------------------------


def decode_pieces(pieces: list[bytes], stops: list[str]) -> tuple[list[Token], PieceDecoder]:
    decoder = PieceDecoder(stops)
    out: list[Token] = []
    for i, piece in enumerate(pieces):
        out += decoder.feed(piece, -float(i + 1))
        if decoder.stopped:
            break
    return out + decoder.flush(), decoder


@FAST
@given(st.text(max_size=40), st.lists(st.integers(0, 200), max_size=15))
def test_utf8_split_anywhere_between_tokens_comes_out_whole(text, cuts):
    pieces = chunked(text.encode("utf-8"), cuts)
    out, _ = decode_pieces(pieces, [])
    assert "".join(t.text for t in out) == text  # no replacement characters, nothing lost
    assert [t.logprob for t in out] == [-float(i + 1) for i in range(len(pieces))]  # a piece inside a character is ""


@FAST
@given(st.lists(st.binary(max_size=6), max_size=12))
def test_any_token_bytes_decode_without_raising_or_losing_text(pieces):
    out, _ = decode_pieces(pieces, [])
    joined = "".join(t.text for t in out)
    data = b"".join(pieces)
    # Invalid bytes become U+FFFD where they are; only an unfinished character (at most three
    # bytes) at the very end is dropped.
    kept = [data[: len(data) - k].decode("utf-8", errors="replace") for k in range(4) if k <= len(data)]
    assert joined in kept
    assert joined == kept[0] or not data[-1:].isascii()


@FAST
@given(STOP_TEXT, st.lists(st.integers(0, 80), max_size=12))
def test_stop_fence_split_across_token_bytes(text, cuts):
    out, decoder = decode_pieces(chunked(text.encode("utf-8"), cuts), [OUTPUT_FENCE])
    assert decoder.stopped == (OUTPUT_FENCE in text)
    assert "".join(t.text for t in out) == text.split(OUTPUT_FENCE)[0]
