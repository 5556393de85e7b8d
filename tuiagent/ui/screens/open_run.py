"""The runs browser: every saved run as a row (date, problem, answer, right or wrong, guards, model,
calls, tokens, time: what fits 80 columns first), sorted and filtered; enter replays a run, space marks runs, c compares the
marked ones, e exports the highlighted run (or the marked ones as a comparison). A path typed in
the filter box and entered opens that file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.coordinate import Coordinate
from textual.screen import ModalScreen
from textual.timer import Timer
from textual.widgets import DataTable, Input, Label

from guards.chain import available
from tuiagent import paths
from tuiagent.runs import RunInfo, recent_runs

if TYPE_CHECKING:
    from textual import getters

    from tuiagent.ui.host import HostApp

# (title, width, sort key) of each column; the problem's width (None) is what the others leave.
COLUMNS: list[tuple[str, int | None, Callable[[RunInfo], Any]]] = [
    ("date", 12, lambda r: r.mtime),
    ("problem", None, lambda r: r.problem.lower()),
    ("answer", 8, lambda r: r.answer or ""),
    ("✓/✗", 3, lambda r: r.result),
    ("guards", 16, lambda r: r.guards),
    ("model", 12, lambda r: r.model),  # widened to the longest model name listed, up to MODEL_MAX
    ("calls", 5, lambda r: -1 if r.calls is None else r.calls),
    ("tokens", 6, lambda r: -1 if r.tokens is None else r.tokens),
    ("time", 6, lambda r: -1.0 if r.wall_s is None else r.wall_s),
]
FILTER_PAUSE_S = 0.15  # the filter applies this long after the last key (ours)
PROBLEM_MIN = 24  # narrower than this, the row scrolls sideways instead (ours)
MODEL_MAX = 24  # a model name longer than this is cut (ours)


def _shown(directory: Path) -> str:
    """The directory as one reads it: relative to here, or with ~ for the home directory."""
    full, here, home = directory.resolve(), Path.cwd().resolve(), Path.home().resolve()
    if full.is_relative_to(here) and full != here:
        return str(full.relative_to(here))
    return "~/" + str(full.relative_to(home)) if full.is_relative_to(home) else str(full)


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def guards_shown(guards: str, installed: set[str]) -> str:
    """``all`` when every installed guard was on, else the guards joined with '+'."""
    return "all" if installed and set(guards.split("+")) == installed else guards


def _when(info: RunInfo, marked: bool) -> Content:
    """The first cell: the mark, then month-day hour:minute."""
    return Content.assemble(("■" if marked else "", "$text-accent"), info.when[5:])


def _cells(
    info: RunInfo, marked: bool, widths: dict[str, int], installed: set[str], *, math: bool = True
) -> list[Content | str]:
    info = info.shown(math=math)
    mark = {"right": ("✓", "$text-success"), "wrong": ("✗", "$text-error")}.get(info.result, ("", ""))
    answer = info.answer if info.answer is not None else ("—" if info.reason == "answer" else info.reason)
    return [
        _when(info, marked),
        _fit(info.problem, widths["problem"]),
        Content.styled(_fit(answer, widths["answer"]), "bold" if info.answer is not None else "$text-muted"),
        Content.styled(*mark),
        _fit(guards_shown(info.guards, installed), widths["guards"]),
        _fit(info.model, widths["model"]),
        "" if info.calls is None else str(info.calls),
        "" if info.tokens is None else str(info.tokens),
        "" if info.wall_s is None else f"{info.wall_s:.1f} s",
    ]


class OpenRunScreen(ModalScreen[tuple[str, list[Path]] | None]):
    """Returns ("replay", [path]), ("compare", paths) or ("export", paths); None when closed."""

    if TYPE_CHECKING:  # the app this runs in, typed the way textual types its own (textual.getters.app)
        app = getters.app(HostApp)

    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("space", "mark", "Mark"),
        Binding("c", "compare", "Compare marked"),
        Binding("e", "export", "Export"),
        Binding("f", "fork", "Fork…"),
        Binding("s", "sort", "Sort by next column"),
        Binding("r", "reverse", "Reverse the order"),
        Binding("slash", "filter", "Filter"),
    ]

    DEFAULT_CSS = """
    OpenRunScreen { align: center middle; }
    OpenRunScreen > Vertical { width: 98%; max-width: 180; height: 90%; border: round $accent;
                               background: $surface; padding: 0 1; border-title-color: $text-muted; }
    OpenRunScreen DataTable { height: 1fr; }
    OpenRunScreen Label { color: $text-muted; width: 1fr; }
    OpenRunScreen #filter { margin: 0; }
    """

    def __init__(self, directory: Path | None = None):
        super().__init__()
        self.directory = directory or paths.runs_dir()
        self.runs = recent_runs(self.directory)
        self.shown: list[RunInfo] = list(self.runs)
        self.marked: set[Path] = set()
        self.sort_column, self.descending = 0, True  # newest first
        self.widths: dict[str, int] = {}
        self._refilter: Timer | None = None
        self.installed = set(available())

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = f"saved runs · {_shown(self.directory)}"
            yield Label("⏎ replay · ␣ mark · c compare · e export · s/r sort · / filter · esc close", id="help")
            yield Input(
                placeholder="/ filter: words in problem, answer, model, guards, right, wrong (a path + enter opens it)",
                id="filter",
                compact=True,
            )
            yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
            if not self.runs:
                yield Label("no runs yet: solve a problem first (f2)")

    def on_mount(self) -> None:
        self.watch(self.app, "raw_math", lambda _: self._fill(), init=False)
        self._columns(self.app.size.width)
        table = self.query_one(DataTable)
        (table if self.runs else self.query_one("#filter", Input)).focus()

    def on_resize(self, event: events.Resize) -> None:
        self._columns(event.size.width)

    def _columns(self, screen_width: int) -> None:
        """The columns for this width: the problem takes what the others leave (a cell pads 1 each side)."""
        box = min(int(screen_width * 0.98), 180) - 4  # the dialog's width, border and padding (DEFAULT_CSS)
        given = {title: width for title, width, _ in COLUMNS}
        given["model"] = min(MODEL_MAX, max([given["model"] or 0, *(len(r.model) for r in self.runs)]))
        fixed = sum(w or 0 for w in given.values()) + 2 * len(COLUMNS) + 2  # + the scrollbar
        widths = {title: width or max(PROBLEM_MIN, box - fixed) for title, width in given.items()}
        if widths == self.widths:  # the resize that follows mounting: the rows are there already
            return
        self.widths = widths
        table = self.query_one(DataTable)
        table.clear(columns=True)
        for title, _, _ in COLUMNS:
            table.add_column(title, width=self.widths[title], key=title)
        self._fill()

    # -- the rows -------------------------------------------------------------------------------

    def _fill(self) -> None:
        """Show the runs that match the filter, sorted; keeps the highlighted run where it can."""
        table = self.query_one(DataTable)
        current = self.current()
        query = self.query_one("#filter", Input).value.strip()
        key = COLUMNS[self.sort_column][2]
        self.shown = sorted((r for r in self.runs if r.matches(query)), key=key, reverse=self.descending)
        table.clear()
        math = not self.app.raw_math
        for info in self.shown:
            cells = _cells(info, info.path in self.marked, self.widths, self.installed, math=math)
            table.add_row(*cells, key=str(info.path))
        for title, _, _ in COLUMNS:  # the sorted column says so
            arrow = (" ▼" if self.descending else " ▲") if title == COLUMNS[self.sort_column][0] else ""
            # textual annotates Column.label as rich Text and draws a Content as well
            table.columns[title].label = Content(title + arrow)  # type: ignore[index, assignment]
        if current is not None and current in self.shown:
            table.move_cursor(row=self.shown.index(current))
        self.query_one(Vertical).border_subtitle = f"{len(self.shown)} of {len(self.runs)} runs"

    def current(self) -> RunInfo | None:
        table = self.query_one(DataTable)
        if not self.shown or not 0 <= table.cursor_row < len(self.shown):
            return None
        return self.shown[table.cursor_row]

    def on_input_changed(self, event: Input.Changed) -> None:
        """Refilter once typing pauses (refilling a thousand rows takes a few hundred ms)."""
        if self._refilter is not None:
            self._refilter.stop()
        self._refilter = self.set_timer(FILTER_PAUSE_S, self._fill)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """A path opens that file; words (a filter) go to the list."""
        text = event.value.strip()
        path = Path(text).expanduser()
        if text and ("/" in text or text.endswith(".jsonl")):
            if not path.is_file():
                self.notify(f"no file {path}", severity="error")
                return
            self.dismiss(("replay", [path]))
            return
        self.query_one(DataTable).focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        info = self.current()
        if info is not None:
            self.dismiss(("replay", [info.path]))

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        index = event.column_index
        self.descending = not self.descending if index == self.sort_column else False
        self.sort_column = index
        self._fill()

    # -- actions --------------------------------------------------------------------------------

    def action_sort(self) -> None:
        """The next column, smallest first (r reverses); the date, newest first."""
        self.sort_column = (self.sort_column + 1) % len(COLUMNS)
        self.descending = self.sort_column == 0
        self._fill()

    def action_reverse(self) -> None:
        self.descending = not self.descending
        self._fill()

    def action_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_mark(self) -> None:
        info = self.current()
        if info is None:
            return
        self.marked ^= {info.path}
        table = self.query_one(DataTable)
        row = table.cursor_row
        table.update_cell_at(Coordinate(row, 0), _when(info, info.path in self.marked))
        table.move_cursor(row=min(row + 1, len(self.shown) - 1))

    def _marked(self) -> list[Path]:
        return [r.path for r in self.runs if r.path in self.marked]

    def action_compare(self) -> None:
        if not 2 <= len(self.marked) <= 4:
            self.notify("mark two to four runs with space first", severity="warning")
            return
        self.dismiss(("compare", self._marked()))

    def action_export(self) -> None:
        info = self.current()
        chosen = self._marked() or ([info.path] if info is not None else [])
        if chosen:
            self.dismiss(("export", chosen))

    def action_fork(self) -> None:
        info = self.current()
        if info is not None:
            self.dismiss(("fork", [info.path]))

    def action_close(self) -> None:
        self.dismiss(None)
