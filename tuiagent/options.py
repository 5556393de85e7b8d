"""Command-line options shared by `tuiagent`, `tuiagent solve` and `tuiagent eval`."""

from __future__ import annotations

from typing import Annotated

import typer

from kernels.sandbox import LEVELS

SandboxOpt = Annotated[str, typer.Option(
    "--sandbox",
    help="What code in the kernel may do: auto (the policy, plus no network where the platform allows), "
         "policy, netns (no network, or an error), off (limits only). See docs/reliability.md.",
)]


def check_sandbox(level: str) -> str:
    if level not in LEVELS:
        raise typer.BadParameter(f"{level!r} is not one of {', '.join(LEVELS)}", param_hint="--sandbox")
    return level
