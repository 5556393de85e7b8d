"""The collection behind ``tuiagent calibrate``: records v2, one line per question.

Each question runs through the real loop, guards off, greedy, in CoT and in tool mode (as the
G-STEP collection's v1 records do); a v2 record adds, per code block, what each guard's calibrator
measures of it (``Calibrator.measure``: ATTC's confidence, the necessity verdicts with the model
judge asked after the run, so the run's tokens are untouched), and held-out questions
(``is_heldout``: every fifth id) get the extra runs calibrators ask for (``Calibrator.runs``: G-STEP
continuing on every answer). Resumable; with ``concurrency`` > 1 the questions run on the batched
engine and each record names its engine. The record format and why: docs/calibration.md ("The records").
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tuiagent.backends.base import Sessions
from tuiagent.core.batch import run_batch
from tuiagent.core.run_spec import RunSpec
from tuiagent.training.calibrators import (
    RECORD_VERSION,
    Ask,
    Block,
    Calibrator,
    heldout_runs,
    installed,
    is_heldout,
)
from tuiagent.training.records import (
    load_records,
    open_records,
    read_questions,
    record_from_events,
    run_part,
    scratch_dir,
)

# What every question runs, greedy: the no-tool run and the tool run.
PARTS = {
    "cot": RunSpec(guards=(), run={"mode": "cot"}, sampling={"temperature": 0.0}),
    "tool": RunSpec(guards=(), run={"mode": "tool"}, sampling={"temperature": 0.0}),
}


async def blocks_of(
    problem: str, events: Sequence[Any], ask: Ask | None, calibrators: Sequence[Calibrator]
) -> list[dict[str, Any]]:
    """The ``tool.blocks`` entries of a tool run's events: where each block is, whether it ran, and
    what each calibrator measured of it (under the guard's name). ``ask``: an async
    ask(question, max_tokens) for judges that are the model itself, or None."""
    from tuiagent.core import events as ev
    from tuiagent.protocol import TokenLP

    tokens: dict[int, list[TokenLP]] = {}
    texts: dict[int, str] = {}
    results = {e.call: e for e in events if isinstance(e, ev.ToolResult)}
    for e in events:
        if isinstance(e, ev.TokenDelta):
            tokens.setdefault(e.turn, []).append(TokenLP(e.text, e.logprob))
        elif isinstance(e, ev.TurnEnded):
            texts[e.turn] = e.text
    out = []
    for code in (e for e in events if isinstance(e, ev.CodeBlock)):
        result = results.get(code.call)
        entry: dict[str, Any] = {
            "call": code.call,
            "turn": code.turn,
            "executed": bool(result and result.executed),
            "error": bool(result and (result.error or result.timed_out)),
        }
        block = Block(problem, code.code, code.call, code.turn, texts.get(code.turn, ""), tokens.get(code.turn, []))
        for c in calibrators:
            measured = await c.measure(block, ask)
            if measured is not None:
                entry[c.guard] = measured
        out.append(entry)
    return out


async def collect(
    model: str | None,
    data: Path,
    start: int,
    n: int,
    records: Path,
    *,
    reuse: Path | None = None,
    models_file: Path | None = None,
    script: Path | None = None,
    threads: int | None = None,
    judge: bool = True,
    concurrency: int = 1,
    log: Any = print,
) -> int:
    """Run the questions ``start .. start+n-1`` not yet in ``records`` as v2; returns how many
    records were appended. ``reuse``: a v1 records file whose CoT runs are taken over."""
    from tuiagent.backends import open_backend
    from tuiagent.core.judge import Judge
    from tuiagent.runner import RunInput, open_model, raise_if_kernel_failed, resolve_spec, run_problem

    spec = resolve_spec(model, models_file)
    calibrators = installed()
    extra = heldout_runs(calibrators)
    store = open_records(records, spec.id, "calibration")
    done = {r.get("qid") for r in store.records if r.get("v") == RECORD_VERSION}
    old = {r["qid"]: r for r in (load_records(reuse) if reuse else []) if r.get("model") == spec.id}
    todo = [q for q in read_questions(data, start, n) if q[0] not in done]
    log(
        f"[calibrate] {len(done)} already in {records}; {len(todo)} to run "
        f"({sum(q[0] in old for q in todo)} of them reuse a v1 CoT run)"
    )
    if not todo:
        return 0
    if threads:
        spec = dataclasses.replace(spec, options={**spec.options, "n_threads": int(threads)})
    concurrency = max(1, int(concurrency))
    if concurrency > 1 and spec.backend == "llama_cpp":
        log(f"[calibrate] {concurrency} questions in flight on llama.cpp's batched engine")
        backend = open_backend(spec, n_seq=concurrency)
    else:
        backend = open_model(spec, script)
    out = scratch_dir("calibrate-collect", spec.id)
    out.mkdir(parents=True, exist_ok=True)
    written = 0

    async def one(qid: int, question: str, gold: str) -> None:
        nonlocal written
        run_backend = backend.session() if isinstance(backend, Sessions) else backend  # one sequence a question
        try:
            await question_runs(run_backend, qid, question, gold)
        finally:
            if run_backend is not backend:
                await run_backend.aclose()

    async def question_runs(backend: Any, qid: int, question: str, gold: str) -> None:
        nonlocal written

        model_judge = Judge(spec.id, backend=backend)  # the model it calibrates, on this question's sequence

        async def ask_model(question: str, max_tokens: int = 3, model: str | None = None) -> Any:
            if model is not None:
                raise ValueError("calibration asks the model it calibrates, not a separate judge model")
            return await model_judge.reply(question, max_tokens)

        t0 = time.monotonic()
        parts: dict[str, list[Any]] = {}
        runs = ("tool",) if qid in old else ("cot", "tool")
        for part in runs + (tuple(extra) if is_heldout(qid) else ()):
            events: list[Any] = []
            given = RunInput(question, gold=gold, model=spec.id, models_file=models_file, script=script, out=out)
            run = PARTS[part] if part in PARTS else extra[part]
            finished = await run_problem(run, given, events.append, backend=backend, model_spec=spec)
            raise_if_kernel_failed(finished, events)
            parts[part] = events
        record = record_from_events(
            qid, question, gold, spec.id, parts["tool"], parts.get("cot", parts["tool"]), version=RECORD_VERSION
        )
        if qid in old:
            if old[qid]["tool"]["answer"] != record["tool"]["answer"]:
                raise RuntimeError(
                    f"q{qid}: the tool run answered {record['tool']['answer']!r}, the v1 record "
                    f"{old[qid]['tool']['answer']!r}: runs are not reproducible here"
                )
            record["cot"] = old[qid]["cot"]
        for name in extra:
            if name in parts:
                record[name] = run_part(parts[name], full=False)
        record["tool"]["blocks"] = await blocks_of(question, parts["tool"], ask_model if judge else None, calibrators)
        record["wall_s"] = round(time.monotonic() - t0, 2)
        record["engine"], record["concurrency"] = getattr(backend, "engine", spec.backend), concurrency
        store.append(record)
        written += 1
        words = [w for w in (c.progress(record) for c in calibrators) if w]
        log(
            f"[calibrate] q{qid}: tool {record['tool']['answer']!r} "
            f"({'right' if record['tool']['correct'] else 'wrong'}, {len(record['tool']['calls'])} calls), "
            f"cot {record['cot']['answer']!r} ({'right' if record['cot']['correct'] else 'wrong'}), "
            + "".join(f"{w}, " for w in words)
            + f"gold {gold}; {record['wall_s']:.0f} s; {len(done) + written} in file"
        )

    try:
        await run_batch(
            todo,
            lambda item: one(*item),
            concurrency=concurrency,
            finish_on_interrupt="calibrate",
            unit="question",
            log=log,
        )
    finally:
        store.close()
        await backend.aclose()
    return written
