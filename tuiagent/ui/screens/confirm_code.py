"""Asks before a code block runs (the "ask before running code" setting): y runs it, n or esc skips it."""

from __future__ import annotations

from rich.syntax import Syntax
from textual.binding import Binding

from tuiagent.ui.screens.question import QuestionScreen


class ConfirmCodeScreen(QuestionScreen):
    BINDINGS = [
        Binding("y", "answer(True)", "Run it"),
        Binding("n,escape", "answer(False)", "Skip it"),
    ]

    def __init__(self, code: str) -> None:
        super().__init__(
            "Run this code block in the kernel?  y runs it, n skips it",
            Syntax(code, "python", theme="ansi_dark", word_wrap=True),
            "Run (y)",
            "Skip (n)",
        )
        self.code = code
