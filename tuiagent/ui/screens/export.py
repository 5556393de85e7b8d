"""Export what the screen shows (a run, or a comparison) to Markdown, HTML or inspect_ai logs, beside
its trajectory."""

from __future__ import annotations

from textual.content import Content

from tuiagent.ui.screens.chooser import ChooserScreen

CHOICES = [
    (("md", False), "Markdown", "the summary, every step, its code, output and guard notes"),
    (("html", False), "HTML page", "one self-contained file: code highlighted, pruned steps kept and marked"),
    (("html", True), "HTML page, token confidence", "as above, each token shaded by its probability"),
    (("inspect", False), "inspect log", "inspect_ai .eval logs, one per setting, for inspect view"),
]


class ExportScreen(ChooserScreen):
    """Returns (format, shade) or None."""

    def __init__(self, what: str):
        super().__init__(f"export {what} (enter or a digit); the file goes beside the trajectory")

    def choices(self) -> list[tuple[Content, tuple[str, bool]]]:
        return [
            (Content.assemble((f"{name:<30}", "bold"), (doc, "$text-muted")), value) for value, name, doc in CHOICES
        ]
