"""The interactive app. Until the Textual app lands, a prompt loop over one loaded model."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rich.console import Console

from tuiagent.runner import RunRequest, open_model, resolve_spec, run_problem
from tuiagent.transcript import TranscriptPrinter


def run_app(*, model: str | None = None, models_file: Path | None = None) -> None:
    asyncio.run(_prompt_loop(model, models_file))


async def _prompt_loop(model: str | None, models_file: Path | None) -> None:
    console = Console(highlight=False)
    spec = resolve_spec(RunRequest(problem="", model=model, models_file=models_file))
    console.print(f"loading {spec.id} ...", style="dim")
    backend = open_model(spec, RunRequest(problem=""))
    console.print("Type a math problem and press Enter (empty line or Ctrl-D to quit).", style="bold")
    try:
        while True:
            try:
                problem = await asyncio.to_thread(input, "\nproblem> ")
            except EOFError:
                break
            if not problem.strip():
                break
            request = RunRequest(problem=problem, model=spec.id, models_file=models_file)
            await run_problem(request, TranscriptPrinter(console), backend=backend, spec=spec)
    finally:
        await backend.aclose()
