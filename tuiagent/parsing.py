"""Reading model text: code fences and boxed answers; and the gold of a GSM8K answer."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

CODE_OPEN = "```python"
OUTPUT_FENCE = "```output"

# A closing fence: three backticks that no word character follows (```python opens, ```` closes).
_CLOSE = re.compile(r"```(?!\w)")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"[{}]")


@dataclass(frozen=True)
class CodeSpan:
    """A closed ```python block in a turn: ``start``/``end`` cover the fences, ``code`` the body."""

    code: str
    start: int
    end: int


def closed_blocks(text: str) -> Iterator[CodeSpan]:
    """Every closed ```python block, in order.

    A block opens at ```python (the rest of that line is not code) and closes at the next closing
    fence; the newline before the fence is not code. One forward scan, no backtracking regex: a
    turn with thousands of unclosed fences is read in linear time, not quadratic.
    """
    pos = 0
    while (start := text.find(CODE_OPEN, pos)) >= 0:
        body = text.find("\n", start + len(CODE_OPEN)) + 1
        close = _CLOSE.search(text, body) if body else None
        if close is None:  # no later fence can close either
            return
        end = close.start()
        yield CodeSpan(text[body : end - 1 if end > body and text[end - 1] == "\n" else end], start, close.end())
        pos = close.end()


def last_closed_block(text: str) -> CodeSpan | None:
    """The last closed ```python block, or None (an unclosed fence is not a block)."""
    found = None
    for block in closed_blocks(text):
        found = block
    return found


def boxed_answers(text: str) -> list[str]:
    r"""Contents of every \boxed{...} (and \fbox{...}), braces matched; unbalanced ones are skipped.

    Braces are matched in one pass with a stack, so a turn full of unclosed \boxed{ stays linear.
    """
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return []
    closing: dict[int, int] = {}  # index after a "{" -> index of its "}"
    opened: list[int] = []
    for m in _BRACE.finditer(text, starts[0] - 1):
        if m.group() == "{":
            opened.append(m.end())
        elif opened:
            closing[opened.pop()] = m.start()
    return [text[s : closing[s]].strip() for s in starts if s in closing]


def final_answer(text: str) -> str | None:
    r"""The last \boxed{} answer in the text (last one wins), or None."""
    answers = boxed_answers(text)
    return answers[-1] if answers else None


def gsm8k_gold(answer: str) -> str | None:
    """The number after the last ``####`` of a GSM8K answer, thousands separators and a trailing
    period removed (``#### 1,203.`` -> ``1203``; a sign and decimals are kept), or None when there
    is no marker or nothing after it."""
    if "####" not in answer:
        return None
    return answer.rsplit("####", 1)[1].strip().replace(",", "").rstrip(".").strip() or None


def tool_block_start(text: str, stop: str, mode: str) -> int | None:
    """Where the code block that asks for a tool call starts, or None when the turn asks for none.

    A closed block asks for a call when generation stopped at the output fence, or when the
    model ended without writing an answer after the block (it forgot the fence).
    """
    block = last_closed_block(text) if mode == "tool" else None
    if block is None or stop == "cancelled":
        return None
    if stop == "stop" or final_answer(text[block.end :]) is None:
        return block.start
    return None
