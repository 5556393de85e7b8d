"""`tuiagent runs`: list, filter and show saved runs from the shell (the index the app's browser and
ctrl+p search use: tuiagent/runs.py). `--json` writes JSON lines, one object per run (or per event)."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from tuiagent import paths
from tuiagent.options import RawMathOpt
from tuiagent.runs import RunInfo, recent_runs
from tuiagent.safetext import for_terminal, terminal_console

runs_app = typer.Typer(
    help="List, filter and show saved runs.",
    no_args_is_help=False,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)
err = terminal_console(stderr=True, highlight=False, soft_wrap=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="JSON lines: one object per run (show: per event).")]


def print_warnings(warnings: list[str]) -> None:
    """Lines of a damaged trajectory that were skipped, on stderr."""
    for warning in warnings:
        err.print(Text("warning: ", style="bold yellow") + Text(for_terminal(warning)))


def print_transcript(file: Path, *, math: bool = True) -> None:
    """The readable transcript of a saved run (`tuiagent replay --print`; ``math``: its math rendered);
    exit 1 when it has no end."""
    from tuiagent.core.trajectory import load
    from tuiagent.transcript import TranscriptPrinter

    loaded = load(file)
    print_warnings(loaded.warnings)
    printer = TranscriptPrinter(math=math)
    for event in loaded.events:
        printer(event)
    if not loaded.events or loaded.events[-1].type != "RunFinished":
        err.print(
            Text("incomplete: ", style="bold yellow")
            + Text("the run has no end in this file (it crashed or was killed); everything up to here is above")
        )
        raise typer.Exit(1)


def _record(info: RunInfo) -> dict[str, Any]:
    return {
        "id": info.path.stem,
        "path": str(info.path),
        "when": info.when,
        "model": info.model,
        "guards": info.guards,
        "answer": info.answer,
        "correct": info.correct,
        "result": info.result,
        "reason": info.reason,
        "problem": info.problem,
        "tool_calls": info.calls,
        "generated_tokens": info.tokens,
        "wall_s": info.wall_s,
        "interventions": info.interventions.split("+") if info.interventions else [],
    }


def _day(value: str | None, option: str) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value[:10])
    except ValueError:
        raise typer.BadParameter(f"not an ISO date (YYYY-MM-DD): {value!r}", param_hint=option) from None


@runs_app.callback(invoke_without_command=True)
def runs_callback(ctx: typer.Context) -> None:
    """Without a command: `tuiagent runs list`."""
    if ctx.invoked_subcommand is None:
        list_runs()


@runs_app.command("list")
def list_runs(
    limit: Annotated[int, typer.Option("-n", "--limit", help="Show at most this many (0: all).")] = 20,
    query: Annotated[str | None, typer.Option("--query", "-q", help="Every word in the problem or answer.")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Runs of this model id.")] = None,
    guard: Annotated[
        list[str] | None, typer.Option("--guard", "-g", help="Runs with this guard on (repeatable).")
    ] = None,
    right: Annotated[bool, typer.Option("--right", help="Only runs graded right.")] = False,
    wrong: Annotated[bool, typer.Option("--wrong", help="Only runs graded wrong.")] = False,
    since: Annotated[str | None, typer.Option("--since", help="On or after this date (YYYY-MM-DD, local).")] = None,
    until: Annotated[str | None, typer.Option("--until", help="On or before this date (YYYY-MM-DD, local).")] = None,
    interventions: Annotated[
        bool,
        typer.Option(
            "--interventions", help="Only runs with an intervention: an edit a fork went on from, an injected fault."
        ),
    ] = False,
    json_: JsonOpt = False,
    raw_math: RawMathOpt = False,
) -> None:
    """Saved runs, newest first: date, id, model, guards, answer, right/wrong ("-": not graded, e.g. a
    cancelled run), what was edited or injected ("-": nothing), problem (their math rendered; --json
    keeps them as written)."""
    if right and wrong:
        raise typer.BadParameter("give --right or --wrong, not both", param_hint="--right/--wrong")
    first, last = _day(since, "--since"), _day(until, "--until")
    skipped: list[tuple[Path, str]] = []
    found = []
    for info in recent_runs(skipped=skipped):
        if query and not all(w in f"{info.problem} {info.answer or ''}".lower() for w in query.lower().split()):
            continue
        if model and info.model != model:
            continue
        if guard and not set(guard) <= set(info.guards.split("+")):
            continue
        if (right and info.result != "right") or (wrong and info.result != "wrong"):
            continue
        if interventions and not info.interventions:
            continue
        day = date.fromisoformat(info.when[:10])
        if (first and day < first) or (last and day > last):
            continue
        found.append(info)
        if limit and len(found) >= limit:
            break
    for path, why in skipped:
        err.print(Text("warning: ", style="bold yellow") + Text(for_terminal(f"skipped {path}: {why}")))
    if not found and not json_:
        err.print(for_terminal(f"no saved run matches in {paths.runs_dir()}"), markup=False)
    if json_:
        for info in found:
            typer.echo(json.dumps(_record(info), ensure_ascii=False))
        return
    shown = [i.shown(math=not raw_math) for i in found]
    rows = [
        [
            info.when,
            info.path.stem,
            info.model,
            info.guards,
            (info.answer if info.answer is not None else info.reason)[:12],
            info.result or "-",
            (info.interventions or "-")[:12],
            info.problem[:40],
        ]
        for info in shown
    ]
    for line in _aligned([list(LIST_HEADER), *rows]) if rows else []:
        typer.echo(for_terminal(line))


LIST_HEADER = ("when", "id", "model", "guards", "answer", "graded", "edited", "problem")


def _aligned(table: list[list[str]]) -> list[str]:
    """The lines of ``table``: each column but the last as wide as its widest cell."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    return ["  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]).rstrip() for row in table]


def resolve(run: str, directory: Path | None = None) -> Path:
    """A run id, a unique prefix of one, or a path: its trajectory file (a usage error, exit 2, otherwise)."""
    given = Path(run).expanduser()
    if given.is_file():
        return given
    directory = directory or paths.runs_dir()
    stems = sorted(p for p in directory.glob("*.jsonl") if p.is_file()) if directory.is_dir() else []
    exact = [p for p in stems if p.stem == run]
    matches = exact or [p for p in stems if p.stem.startswith(run)]
    if not matches:
        raise typer.BadParameter(f"no saved run {run!r} in {directory}", param_hint="RUN")
    if len(matches) > 1:
        names = ", ".join(p.stem for p in matches[:5]) + (" …" if len(matches) > 5 else "")
        raise typer.BadParameter(f"{run!r} matches {len(matches)} runs: {names}", param_hint="RUN")
    return matches[0]


@runs_app.command("show")
def show(
    run: Annotated[str, typer.Argument(help="A run id, a unique prefix of one, or a trajectory file.")],
    json_: JsonOpt = False,
    raw_math: RawMathOpt = False,
) -> None:
    """Print one saved run: the readable transcript (`replay --print`), or its events with --json."""
    file = resolve(run)
    if not json_:
        print_transcript(file, math=not raw_math)
        return
    from tuiagent.core import events as ev
    from tuiagent.core.trajectory import load

    loaded = load(file)
    print_warnings(loaded.warnings)
    for event in loaded.events:
        typer.echo(json.dumps(ev.to_dict(event), ensure_ascii=False))
