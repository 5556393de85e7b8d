"""Reading model text: code fences and boxed answers."""

from __future__ import annotations

import re
from dataclasses import dataclass

CODE_OPEN = "```python"
OUTPUT_FENCE = "```output"

# A closed python block: the opening fence line, the code, a closing fence on its own line.
_CLOSED_BLOCK = re.compile(r"```python[^\n]*\n(.*?)\n?```(?!\w)", re.DOTALL)


@dataclass(frozen=True)
class CodeSpan:
    """A closed ```python block in a turn: ``start``/``end`` cover the fences, ``code`` the body."""

    code: str
    start: int
    end: int


def last_closed_block(text: str) -> CodeSpan | None:
    """The last closed ```python block, or None (an unclosed fence is not a block)."""
    found = None
    for m in _CLOSED_BLOCK.finditer(text):
        found = CodeSpan(m.group(1), m.start(), m.end())
    return found


def has_unclosed_block(text: str) -> bool:
    """True when the text opens a ```python fence that is never closed."""
    last_open = text.rfind(CODE_OPEN)
    if last_open < 0:
        return False
    block = last_closed_block(text)
    return block is None or block.start < last_open


def boxed_answers(text: str) -> list[str]:
    r"""Contents of every \boxed{...} (and \fbox{...}), braces matched; unbalanced ones are skipped."""
    answers = []
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            answers.append(text[m.end() : i - 1].strip())
    return answers


def final_answer(text: str) -> str | None:
    r"""The last \boxed{} answer in the text (last one wins), or None."""
    answers = boxed_answers(text)
    return answers[-1] if answers else None


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
