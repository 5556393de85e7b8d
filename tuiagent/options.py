"""Command-line options shared by `tuiagent`, `tuiagent solve`, the commands that show a run and `tuiagent eval`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from kernels.sandbox import check_level

if TYPE_CHECKING:
    from tuiagent.core.run_spec import RunSpec

SandboxOpt = Annotated[
    str,
    typer.Option(
        "--sandbox",
        help="What code in the kernel may do: auto (the strongest level this machine has), strict (the OS "
        "boundary: bubblewrap, Landlock, seccomp; or an error), netns (policy without network), policy "
        "(audit hook only), off (limits only). See docs/reliability.md.",
    ),
]


NetworkOpt = Annotated[
    bool,
    typer.Option(
        "--allow-network",
        help="Let code in the kernel use the network (off by default at every sandbox level but off).",
    ),
]


RawMathOpt = Annotated[
    bool,
    typer.Option(
        "--raw-math",
        help="Show the model's LaTeX as it wrote it (by default \\(3 \\times 17\\) reads 3 × 17; see docs/app.md).",
    ),
]


FaithfulOpt = Annotated[
    bool,
    typer.Option(
        "--faithful",
        help="The paper profile: every guard that is on, under its paper's (or reference code's) reading "
        "wherever tuiagent has a choice; what you set yourself still wins (`tuiagent guards --explain` "
        "lists the choices of ours that remain).",
    ),
]


def check_sandbox(level: str) -> str:
    try:
        return check_level(level)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--sandbox") from None


def check_budgets(spec: RunSpec, hint: str | None = None) -> None:
    """A budget no run can keep (RunSettings says which) is a usage error, before any work."""
    try:
        spec.settings()
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint=hint) from None


SET_HELP = (
    "A setting, KEY=VALUE (repeat): a guard's (attc.threshold=0.95), a budget (max_tool_calls=6), "
    "sampling (temperature=0.7, turn_max_tokens=512), mode, tool (python or calculator) or kernel; docs/runs.md."
)

SetOpt = Annotated[list[str] | None, typer.Option("--set", help=SET_HELP)]
