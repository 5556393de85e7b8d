"""Open a saved run: the recent runs (newest first), or a path typed in. Enter replays the highlighted
run; space marks runs and c compares the marked ones (two to four)."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from tuiagent import paths
from tuiagent.ui.runs import RunInfo, recent_runs


def run_prompt(info: RunInfo, marked: bool) -> Content:
    right = {True: ("✓", "$text-success"), False: ("✗", "$text-error"), None: (" ", "")}[info.correct]
    return Content.assemble(
        ("■ " if marked else "  ", "$text-accent"), (f"{info.when} ", "$text-muted"), right, " ",
        (f"{(info.answer or '—')[:12]:<12} ", "bold"), (info.problem[:70], ""),
        (f"  {info.reason}" if info.reason != "answer" else "", "$text-muted"),
    )


class OpenRunScreen(ModalScreen[tuple[str, list[Path]] | None]):
    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("space", "mark", "Mark"),
        Binding("c", "compare", "Compare marked"),
    ]

    DEFAULT_CSS = """
    OpenRunScreen { align: center middle; }
    OpenRunScreen > Vertical { width: 95%; max-width: 130; height: 85%; border: round $accent;
                               background: $surface; padding: 0 1; }
    OpenRunScreen OptionList { height: 1fr; border: none; }
    OpenRunScreen Label { color: $text-muted; }
    """

    def __init__(self, directory: Path | None = None):
        super().__init__()
        self.directory = directory or paths.runs_dir()
        self.runs = recent_runs(self.directory)
        self.marked: set[int] = set()

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"recent runs in {self.directory} · enter replays · space marks · c compares marked")
            yield Input(placeholder="or type a trajectory path and press enter", id="path")
            options = [Option(run_prompt(r, False)) for r in self.runs]
            yield OptionList(*options, id="runs")
            if not self.runs:
                yield Label("no runs yet: solve a problem first (f2)")

    def on_mount(self) -> None:
        self.query_one("#runs" if self.runs else "#path").focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(("replay", [self.runs[event.option_index].path]))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        path = Path(event.value.strip()).expanduser()
        if not path.is_file():
            self.notify(f"no file {path}", severity="error")
            return
        self.dismiss(("replay", [path]))

    def action_mark(self) -> None:
        runs = self.query_one("#runs", OptionList)
        i = runs.highlighted
        if i is None or not self.runs:
            return
        self.marked ^= {i}
        runs.replace_option_prompt_at_index(i, run_prompt(self.runs[i], i in self.marked))
        runs.action_cursor_down()

    def action_compare(self) -> None:
        if not 2 <= len(self.marked) <= 4:
            self.notify("mark two to four runs with space first", severity="warning")
            return
        self.dismiss(("compare", [self.runs[i].path for i in sorted(self.marked)]))

    def action_close(self) -> None:
        self.dismiss(None)
