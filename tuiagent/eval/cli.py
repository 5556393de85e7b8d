"""``tuiagent eval``: run datasets under several settings, resumably, and report.

Registered on the main typer app at the end of tuiagent/cli.py. Imports stay light here: the
harness, the runner and the model are imported when the command runs.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tuiagent.core.run_spec import DEFAULTS
from tuiagent.core.termination import cancelled_on_termination
from tuiagent.options import FaithfulOpt, SandboxOpt, check_sandbox

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import TaskID

    from tuiagent.eval.harness import EvalConfig, EvalOutcome

FORMATS = ("table", "md", "csv", "json", "png")


def _split(values: list[str] | None) -> list[str]:
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


def eval_command(
    datasets: Annotated[
        list[str],
        typer.Argument(
            help="demo (the built-in set), a JSONL file (GSM8K, MATH/MATH-500 or AIME shape), or hf:NAME[:CONFIG][:SPLIT]; "
            "with --report-only, results directories."
        ),
    ],
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Model id from models.toml (default: its `default`).")
    ] = None,
    models: Annotated[
        Path | None, typer.Option("--models", help="A models.toml that overrides the shipped and user ones.")
    ] = None,
    script: Annotated[
        Path | None, typer.Option("--script", help="Turns to replay with `--model scripted` (every run replays it).")
    ] = None,
    config: Annotated[
        list[str] | None,
        typer.Option(
            "--config",
            "-c",
            help=(
                "A setting to run every problem under (repeat): none, all, guard names joined by + (attc+prunetir), a "
                "condition (full, cot, noop, oracle, max1), a preset (`tuiagent presets`); then :KEY=VALUE,... e.g. "
                "'attc+prunetir:attc.threshold=0.9' or 'full:max_tool_calls=8'. Default: none."
            ),
        ),
    ] = None,
    configs: Annotated[
        Path | None,
        typer.Option(
            "--configs", help="A TOML file of more presets ([presets.NAME] tables); without -c, all of them run."
        ),
    ] = None,
    protocol: Annotated[
        list[str] | None,
        typer.Option(
            "--protocol",
            metavar="VALUE[:KEY=V,...]",
            help=(
                "A paper protocol (repeat): a value adds its settings (tim, say) or turns a part of the protocol "
                "on (cues, say), some with keys, VALUE:KEY=VALUE,... e.g. 'cues:cue=cell+web_index'; "
                "`tuiagent protocols` lists the installed values, what each adds and its keys."
            ),
        ),
    ] = None,
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="The setting differences are taken against (default: the first).")
    ] = None,
    seeds: Annotated[
        int, typer.Option(min=1, help="Samples per problem and setting (Pass@1 averaged); use with --temperature.")
    ] = 1,
    temperature: Annotated[float | None, typer.Option(min=0, help="Sampling temperature for every run.")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="A run or sampling value for every setting, KEY=VALUE (repeat): max_tool_calls=6, temperature=0.7, "
            "tool=calculator, ... (a setting's own value wins; a guard's value goes in its setting: "
            "-c 'attc:attc.threshold=0.95'); docs/runs.md.",
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N problems of each dataset.")] = None,
    offset: Annotated[int, typer.Option(min=0, help="Skip the first N problems of each dataset.")] = 0,
    problem_id: Annotated[
        list[str] | None, typer.Option("--id", help="Only these problem ids (repeat or comma-separate).")
    ] = None,
    question_field: Annotated[str | None, typer.Option(help="JSONL field holding the question.")] = None,
    answer_field: Annotated[
        str | None, typer.Option(help="JSONL field holding the gold answer (#### N and \\boxed{} are read).")
    ] = None,
    id_field: Annotated[str | None, typer.Option(help="JSONL field holding the problem id.")] = None,
    inject: Annotated[
        list[str] | None,
        typer.Option(
            "--inject",
            help=(
                "Fault injection: also run every problem with each of these faults in a tool output (comma-separate or "
                "repeat): wrong-number, error, empty, timeout, stale; the same fault under every setting, paired with "
                "the clean runs in the report's 'Injected faults' section."
            ),
        ),
    ] = None,
    inject_at: Annotated[
        int,
        typer.Option("--inject-at", min=1, help="With --inject: the executed tool call the fault hits (default 1)."),
    ] = 1,
    broken_tool: Annotated[
        bool,
        typer.Option(
            "--broken-tool", help="With --inject: every later run of the same code gets the fault too (a broken tool)."
        ),
    ] = False,
    judge: Annotated[
        str | None,
        typer.Option(
            "--judge",
            help=(
                "The judge model (a models.toml id: a local model, a server, vLLM): with --protocol cues it judges each "
                "executed call's necessity (Spurious Tool Use, Appendix A.3), with --protocol tim the TIM metrics (Appendix "
                "A.2-A.4), with --protocol attc-audit ATTC's audits, with --protocol distractors whether each variant keeps "
                "its answer (a variant it says does not is left out); judgements are cached in the results directory. Never "
                "the model under test unless named (then a warning)."
            ),
        ),
    ] = None,
    judge_json: Annotated[
        bool,
        typer.Option(
            "--judge-json",
            help=(
                "Hold the judge's replies to the JSON schema each paper's prompt prints (structured outputs: a llama.cpp "
                "grammar, vLLM, a server's response_format), so a small judge cannot break the format; cached apart "
                "from free replies. The prompts stay verbatim; pairwise questions still go both ways."
            ),
        ),
    ] = False,
    concurrency: Annotated[
        int,
        typer.Option(
            min=1,
            help="Runs in flight (a local llama.cpp model decodes them in one batch; vLLM / OpenAI-compatible servers).",
        ),
    ] = 1,
    sandbox: SandboxOpt = "auto",
    faithful: FaithfulOpt = False,
    max_tool_calls: Annotated[
        int | None, typer.Option(min=0, help=f"Tool-call budget (default {DEFAULTS.max_tool_calls}, [ref]).")
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option(min=1, help=f"Generated-token budget per run (default {DEFAULTS.max_tokens}).")
    ] = None,
    max_time: Annotated[
        float | None,
        typer.Option(
            min=1,
            help=(
                "Wall-time budget per run in seconds. Default: none, so a run ends by tokens, tool calls and turns "
                "and its record does not depend on the machine's load (an eval made before this default: 600)."
            ),
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(min=0.1, help=f"Per-call execution timeout in seconds (default {DEFAULTS.exec_timeout_s:g})."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help=("Results directory (default: <data dir>/evals/<name>); the same directory resumes.")
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Name of the results directory under <data dir>/evals.")] = None,
    reuse_generations: Annotated[
        bool,
        typer.Option(
            "--reuse-generations/--no-reuse-generations",
            help="On the local model, generate a turn that an earlier run of this eval generated identically (same prompt and history) once, and reuse it (runs are bit-exact, so it changes no result).",
        ),
    ] = True,
    retry_errors: Annotated[
        bool, typer.Option("--retry-errors", help="Run again the runs that ended with a backend or kernel error.")
    ] = False,
    shard: Annotated[
        str | None,
        typer.Option(
            "--shard",
            help=(
                "Run only shard I of N (I/N, e.g. 1/2): every N-th selected problem from the I-th, for another machine to "
                "run the rest; merge the shards' directories with --report-only DIR DIR... --out DIR."
            ),
        ),
    ] = None,
    report_only: Annotated[
        bool,
        typer.Option(
            "--report-only",
            help=(
                "Run nothing: report what the results directory holds; given several directories (shards of one eval), "
                "merge them into --out and report that."
            ),
        ),
    ] = False,
    formats: Annotated[
        list[str] | None,
        typer.Option(
            "--format",
            "-f",
            help=("Report forms (repeat): table, md, csv, json, png. Default: all (png needs matplotlib)."),
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no table; files only.")] = False,
    inspect_log: Annotated[
        bool,
        typer.Option(
            "--inspect-log",
            help=(
                "Also write inspect_ai eval logs, one per dataset and setting, into <results dir>/inspect/ "
                "(open them with `inspect view`); needs tuiagent[inspect]."
            ),
        ),
    ] = False,
) -> None:
    """Evaluate a model on datasets under several guard settings; resumable, with paired comparisons."""
    from rich.console import Console

    from tuiagent import presets as cf
    from tuiagent.errors import UserError
    from tuiagent.eval import protocols as pr
    from tuiagent.eval import report as rp
    from tuiagent.eval.datasets import Fields
    from tuiagent.eval.dir_lock import exclusive
    from tuiagent.eval.harness import EvalConfig, default_out
    from tuiagent.eval.merge import merge_shards
    from tuiagent.eval.results import MANIFEST
    from tuiagent.eval.shards import parse_shard
    from tuiagent.runner import resolve_spec
    from tuiagent.safetext import terminal_console

    err = terminal_console(stderr=True, highlight=False, soft_wrap=True, markup=False)
    if judge_json:
        from tuiagent.core.judge import judge_name

        if not judge:
            raise UserError("--judge-json holds a judge's replies to JSON: pass --judge MODEL (a models.toml id) too")
        judge = judge_name(judge, True)
    if inspect_log:  # before any run: an eval that cannot write its logs should not start
        from tuiagent.export.inspect_log import require_inspect

        require_inspect()
    chosen = set(_split(formats)) or set(FORMATS)
    if chosen - set(FORMATS):
        raise typer.BadParameter(
            f"unknown format(s) {', '.join(sorted(chosen - set(FORMATS)))}; use {', '.join(FORMATS)}",
            param_hint="--format",
        )
    shards = parse_shard(shard) if shard else None
    picked = pr.chosen(protocol or [])
    dirs = [Path(d).expanduser() for d in datasets]
    results_dirs = report_only and all((d / MANIFEST).is_file() for d in dirs)  # results directories, not datasets
    if report_only and not results_dirs:
        from tuiagent.eval.published import published

        for d in dirs:
            if not d.exists() and d.name in published():
                raise UserError(
                    f"{d} is not here: it is one of the project's measured evals; fetch it with "
                    f"`tuiagent results fetch {d.name}` (into evals/)"
                )
    if results_dirs:
        if len(dirs) > 1 and out is None:
            raise UserError(f"merging {len(dirs)} shard directories needs --out DIR for the merged results")
        directory = (out or dirs[0]).expanduser()
    else:
        spec = resolve_spec(model, models)
        directory = (out or default_out(datasets, spec.id, name)).expanduser()
        if shards and out is None:  # one machine may run several shards: a directory each
            directory = directory.with_name(f"{directory.name}-shard{shards[0]}of{shards[1]}")
    with exclusive(directory):  # one writer per directory, for the whole command
        if results_dirs:
            for line in merge_shards(dirs, directory) if len(dirs) > 1 else []:
                err.print(f"incomplete: {line}")
            for p in pr.installed():  # a protocol's work over the stored runs (ATTC's audits, say)
                if p.name in picked.options:
                    stored = pr.StoredPass(directory, picked.options[p.name], judge, models, err.print, concurrency)
                    asyncio.run(p.stored(stored))

        failed = 0
        if not report_only:
            named = cf.load_presets(configs, model=spec.id, models_file=models)
            default = list(cf.load_preset_file(configs)) if configs else None  # no -c: every config of the file
            settings = cf.resolve_settings(
                _split(config) if config else [],
                named=named,
                default=default,
                added=picked.settings,
            )
            if faithful:  # the paper profile over each setting, named apart: it is another setting
                settings = [cf.faithful_preset(p) for p in settings]
            if baseline and baseline not in {s.name for s in settings}:
                raise UserError(
                    f"--baseline {baseline!r} is not one of the settings: {', '.join(s.name for s in settings)}"
                )
            from tuiagent.core.faults import parse_kinds

            kinds = parse_kinds(inject or [])
            if (inject_at != 1 or broken_tool) and not kinds:
                raise UserError("--inject-at and --broken-tool go with --inject KIND[,KIND...]")
            run = {
                k: v
                for k, v in {
                    "max_tool_calls": max_tool_calls,
                    "max_tokens": max_tokens,
                    "max_wall_s": max_time,
                    "exec_timeout_s": timeout,
                }.items()
                if v is not None
            }
            base = cf.given_spec(None, set_, run=run, sampling={"temperature": temperature})
            if base.guard_settings or base.guards:
                raise UserError(
                    "--set in an eval takes run and sampling values (they are laid under every setting); "
                    "a guard's value belongs to a setting: -c 'attc:attc.threshold=0.95'"
                )
            cfg = EvalConfig(
                datasets=list(datasets),
                settings=settings,
                out=directory,
                model=spec.id,
                models_file=models,
                script=script,
                seeds=seeds,
                limit=limit,
                offset=offset,
                ids=set(_split(problem_id)) or None,
                fields=Fields(question_field, answer_field, id_field),
                concurrency=concurrency,
                sandbox=check_sandbox(sandbox),
                base=base,
                retry_errors=retry_errors,
                baseline=baseline,
                reuse_generations=reuse_generations,
                judge=judge,
                shard=shards,
                protocols=list(picked.values),
                options=picked.options,
                inject=kinds,
                inject_at=inject_at,
                broken_tool=broken_tool,
            )
            outcome = _run_with_progress(cfg, err, quiet)
            failed = outcome.failed
            rate = f", {outcome.throughput_per_min:.1f} runs/min" if outcome.ran else ""
            err.print(
                f"{outcome.ran} run(s) done, {outcome.already_done} already in {directory / 'results.jsonl'}"
                f"{f', {outcome.failed} failed' if outcome.failed else ''}{rate}"
            )

        summary = rp.summary_from_store(directory, baseline=baseline)
        if not summary["datasets"]:
            raise UserError(f"no results in {directory} yet")
        if "table" in chosen and not quiet:
            rp.print_terminal(summary, terminal_console(highlight=False, markup=False, width=max(Console().width, 140)))
        written, messages = rp.write_reports(summary, directory, chosen - {"table"})
        for message in messages:
            err.print(message)
        if written:
            err.print("reports: " + ", ".join(str(p) for p in written))
        if inspect_log:
            from tuiagent.eval.inspect_logs import write_inspect_logs

            logs = write_inspect_logs(directory, log=err.print)
            err.print(
                f"inspect logs: {len(logs)} in {directory / 'inspect'} (open them with "
                f"`inspect view --log-dir {directory / 'inspect'}`)"
            )
        err.print(
            f"results: {directory / 'results.jsonl'} (trajectories under {directory / 'runs'}; "
            "replay one with `tuiagent replay FILE`)"
        )
        if failed:
            err.print(f"{failed} run(s) failed (above: why); the same command runs them again")
            raise typer.Exit(1)


@dataclass
class _Tally:
    """The progress bar's task and the runs of this session so far."""

    task: TaskID | None = None
    right: int = 0
    done: int = 0


def eta(done: float, total: float | None, elapsed: float | None) -> str:
    """Time left at the mean pace of the runs done so far (H:MM:SS), once one has finished. Rich's own
    column takes its pace from the last 30 seconds only, so with runs longer than that it shows none."""
    if not done or total is None or elapsed is None:
        return "-:--:--"
    left = int(max(total - done, 0) * elapsed / done)
    return f"{left // 3600}:{left // 60 % 60:02d}:{left % 60:02d}"


def _run_with_progress(cfg: EvalConfig, err: Console, quiet: bool) -> EvalOutcome:
    """Run the eval under a rich progress bar (ETA, accuracy so far); Ctrl-C stops it, resumable."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        Task,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.text import Text

    from tuiagent.eval.harness import run_eval

    class MeanPaceEta(ProgressColumn):
        def render(self, task: Task) -> Text:
            return Text(eta(task.completed, task.total, task.elapsed), style="progress.remaining")

    show = not quiet and err.is_terminal
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        MeanPaceEta(),
        TextColumn("{task.fields[status]}"),
        console=err,
        disable=not show,
    )
    state = _Tally()

    def log(message: str) -> None:
        (progress.console if show else err).print(message)

    def on_plan(total: int, done: int) -> None:
        log(f"{total} run(s) planned, {done} already done: {total - done} to run")
        state.task = progress.add_task("eval", total=total - done, status="")

    def on_record(record: dict[str, Any]) -> None:
        state.done += 1
        state.right += record.get("correct") is True
        status = f"acc {state.right / state.done:.2f} | last {record['setting']} {record['problem_id']}"
        if state.task is not None:
            progress.update(state.task, advance=1, status=status)
        if not show and not quiet:
            err.print(
                f"[{state.done}] {record['key']}: {'right' if record.get('correct') else 'wrong'} "
                f"({record.get('answer')!r}, {record.get('tcn')} calls, {record.get('wall_s')} s)"
            )

    def on_variant(n: int, total: int) -> None:
        if n == total or n % 10 == 0:
            log(f"variants written: {n}/{total}")

    stopped_by: list[signal.Signals] = []
    with progress:
        try:
            return asyncio.run(
                cancelled_on_termination(
                    run_eval(cfg, log=log, on_plan=on_plan, on_record=on_record, on_variant_progress=on_variant),
                    stopped_by,
                )
            )
        except (KeyboardInterrupt, asyncio.CancelledError):  # eval.json records the session as interrupted
            progress.stop()
            err.print(
                f"{'terminated' if stopped_by else 'interrupted'}: {state.done} run(s) of this session are saved in "
                f"{cfg.out / 'results.jsonl'}; run the same command again to continue where it stopped"
            )
            sys.exit(128 + (stopped_by[0] if stopped_by else signal.SIGINT))
