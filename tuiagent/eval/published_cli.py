"""`tuiagent results`: list the project's measured evals and fetch them into evals/ (eval.published)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tuiagent.eval import published as pub

results_app = typer.Typer(
    help="The project's measured evals (the result directories its docs cite): list them, fetch them into evals/.",
    no_args_is_help=False,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)

ToOpt = Annotated[Path | None, typer.Option("--to", help="Where the directories go (default: evals/ in the checkout).")]


@results_app.callback(invoke_without_command=True)
def results_callback(ctx: typer.Context) -> None:
    """Without a command: the list."""
    if ctx.invoked_subcommand is None:
        list_command(None)


@results_app.command("list")
def list_command(to: ToOpt = None) -> None:
    """Each measured eval, whether it is fetched, and where its report is kept beside the docs."""
    where = to or pub.CHECKOUT / "evals"
    names = pub.published()
    if not names:
        print(f"no measured evals here: their reports come with a git checkout of tuiagent (not {pub.REPORTS})")
    for name in names:
        here = (where / name / "results.jsonl").is_file()
        print(f"{name:28} {'fetched' if here else 'not fetched':12} {pub.REPORTS / name / 'summary.md'}")


@results_app.command("fetch")
def fetch_command(
    names: Annotated[list[str] | None, typer.Argument(help="Which (default: all); `tuiagent results list`.")] = None,
    to: ToOpt = None,
) -> None:
    """Copy measured evals into evals/ (from the git branch `results`, or main's history), offline; a
    directory already there is left as it is. Then `tuiagent eval evals/NAME --report-only` reports it."""
    where = to or pub.CHECKOUT / "evals"
    source, copied = pub.fetch(list(names or []), where)
    for name in copied:
        print(f"fetched {where / name} (from {source.described})")
    for name in sorted(set(names or pub.published()) - set(copied)):
        print(f"already there: {where / name}")
