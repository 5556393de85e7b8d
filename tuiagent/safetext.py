"""Text from a problem, a model, a kernel or a trajectory file, made safe to show on a terminal.

Such text may carry terminal control sequences: an OSC that sets the window title or writes the
clipboard (OSC 52), a DCS, a CSI that clears the screen or moves the cursor, a bare carriage
return that overwrites a line, or a bidi override that shows code other than it is (CVE-2021-42574).
``for_terminal`` shows every such character as a visible placeholder (C0 controls as their Unicode
Control Pictures, ESC as ␛, C1 controls, DEL and bidi controls as ⟨U+XXXX⟩), so what is left of a
sequence is plain, inert text a reader can still see. Trajectories keep the verbatim text; only
what is shown goes through here. Newlines and tabs stay as they are.

Every command prints through ``terminal_console`` (rich) or ``echo`` (plain lines), which apply it to all
they write when the stream is a terminal, and leave a file or pipe the text as it is.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.segment import Segment

# C0 (but \t and \n) as Control Pictures U+2400..U+241F; DEL, C1 and the bidi embedding, override
# and isolate controls as code points.
_TABLE: dict[int, str] = {c: chr(0x2400 + c) for c in range(0x20) if chr(c) not in "\t\n"}
_TABLE.update({c: f"⟨U+{c:04X}⟩" for c in (0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A))})
_UNSAFE = re.compile("[" + "".join(re.escape(chr(c)) for c in _TABLE) + "]")


def for_terminal(text: str) -> str:
    """``text`` with every control character shown as a visible placeholder (CRLF read as a newline)."""
    if not _UNSAFE.search(text):
        return text
    return text.replace("\r\n", "\n").translate(_TABLE)


class _TerminalConsole(Console):
    """Rich's console whose content (every segment but rich's own cursor controls) goes through
    ``for_terminal`` when it writes to a terminal; styles stay, and a file or pipe gets the text as it is."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        if self.is_terminal:
            buffer = [s if s.control else Segment(for_terminal(s.text), s.style) for s in buffer]
        return super()._render_buffer(buffer)


def terminal_console(**options: Any) -> Console:
    """The console every command prints with (rich's options): the one way text reaches a terminal."""
    return _TerminalConsole(**options)


def echo(text: str, err: bool = False, end: str = "\n") -> None:
    """Write ``text`` and ``end`` to standard output (``err``: standard error), through ``for_terminal``
    when that is a terminal."""
    stream = sys.stderr if err else sys.stdout
    stream.write((for_terminal(text) if stream.isatty() else text) + end)
