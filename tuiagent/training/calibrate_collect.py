"""The collection behind ``tuiagent calibrate``: records v2, one line per question.

Each question runs through the real loop, guards off, greedy, in CoT and in tool mode (as the
G-STEP collection's v1 records do); a v2 record adds, per code block, what the guards' fits need:
its ATTC confidence (the guard's own function) and the necessity verdicts, the model judge asked
after the run so the run's tokens are untouched. Held-out questions (``is_heldout``: every fifth
id) get a third run with G-STEP continuing on every answer. Resumable; with ``concurrency`` > 1
the questions run on the batched engine and each record names its engine. The record format and
why: docs/calibration.md ("The records").
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from guards.gstep.training import (
    load_records,
    open_records,
    read_questions,
    record_from_events,
    run_part,
    scratch_dir,
)
from tuiagent.backends.base import Sessions
from tuiagent.core.batch import run_batch
from tuiagent.core.run_spec import RunSpec

RECORD_VERSION = 2
HELDOUT_EVERY = 5  # [ours] question ids divisible by this are held out from every fit


# G-STEP sending every answer back: any gate gives p >= 0 (a calibration may have set weights off)
CONTINUE_ALWAYS = {"tau": 0.0, "weights": "auto"}
# What each collected run is, greedy: the no-tool run, the tool run, and (held-out questions) the
# tool run with G-STEP sending every answer back.
PARTS = {
    "cot": RunSpec(guards=(), run={"mode": "cot"}, sampling={"temperature": 0.0}),
    "tool": RunSpec(guards=(), run={"mode": "tool"}, sampling={"temperature": 0.0}),
    "continue": RunSpec(
        guards=("gstep",),
        guard_settings={"gstep": CONTINUE_ALWAYS},
        run={"mode": "tool"},
        sampling={"temperature": 0.0},
    ),
}


def is_heldout(qid: int) -> bool:
    return qid % HELDOUT_EVERY == 0


async def blocks_of(problem: str, events: Sequence[Any], judge: Any | None) -> list[dict[str, Any]]:
    """The ``tool.blocks`` entries of a tool run's events (see the module docstring).
    ``judge``: an async judge(question, max_tokens) for the necessity model judge, or None."""
    from guards.attc.guard import block_confidence
    from guards.necessity.guard import Necessity, arithmetic_judge
    from tuiagent.core import events as ev
    from tuiagent.protocol import RunView, TokenLP

    tokens: dict[int, list[TokenLP]] = {}
    texts: dict[int, str] = {}
    results = {e.call: e for e in events if isinstance(e, ev.ToolResult)}
    for e in events:
        if isinstance(e, ev.TokenDelta):
            tokens.setdefault(e.turn, []).append(TokenLP(e.text, e.logprob))
        elif isinstance(e, ev.TurnEnded):
            texts[e.turn] = e.text
    guard = Necessity(Necessity.Settings(judge="model"))
    out = []
    for block in (e for e in events if isinstance(e, ev.CodeBlock)):
        conf, mean, n = block_confidence(texts.get(block.turn, ""), tokens.get(block.turn, []))
        result = results.get(block.call)
        necessary, p_rule, _ = arithmetic_judge(block.code, question=problem)
        entry: dict[str, Any] = {
            "call": block.call,
            "turn": block.turn,
            "executed": bool(result and result.executed),
            "error": bool(result and (result.error or result.timed_out)),
            "attc": {"confidence": conf, "mean_logprob": mean, "tokens": n},
            "necessity": {"rule": {"necessary": necessary, "p_unnecessary": p_rule}},
        }
        if judge is not None:
            view = RunView(
                problem=problem,
                mode="tool",
                turn=block.turn,
                turn_text=texts.get(block.turn, ""),
                turn_tokens=tokens.get(block.turn, []),
                calls=(),
                segments=(),
                max_tool_calls=0,
                tools_suspended=False,
                judge=judge,
            )
            verdict = await guard.on_code(block.code, view)
            entry["necessity"]["model"] = {
                k: v for k, v in verdict.data.items() if k not in ("mode", "threshold", "skipped")
            }
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
    out = scratch_dir(spec.id)
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

        judge = Judge(spec.id, backend=backend)  # the model it calibrates, on this question's sequence

        async def ask_model(question: str, max_tokens: int = 3, model: str | None = None) -> Any:
            if model is not None:
                raise ValueError("calibration asks the model it calibrates, not a separate judge model")
            return await judge.reply(question, max_tokens)

        t0 = time.monotonic()
        parts: dict[str, list[Any]] = {}
        runs = ("tool",) if qid in old else ("cot", "tool")
        for part in runs + (("continue",) if is_heldout(qid) else ()):
            events: list[Any] = []
            given = RunInput(question, gold=gold, model=spec.id, models_file=models_file, script=script, out=out)
            finished = await run_problem(PARTS[part], given, events.append, backend=backend, model_spec=spec)
            raise_if_kernel_failed(finished, events)
            parts[part] = events
        record = record_from_events(qid, question, gold, spec.id, parts["tool"], parts.get("cot", parts["tool"]))
        record["v"] = RECORD_VERSION
        if qid in old:
            if old[qid]["tool"]["answer"] != record["tool"]["answer"]:
                raise RuntimeError(
                    f"q{qid}: the tool run answered {record['tool']['answer']!r}, the v1 record "
                    f"{old[qid]['tool']['answer']!r}: runs are not reproducible here"
                )
            record["cot"] = old[qid]["cot"]
        if "continue" in parts:
            record["continue"] = run_part(parts["continue"], full=False)
        record["tool"]["blocks"] = await blocks_of(question, parts["tool"], ask_model if judge else None)
        record["wall_s"] = round(time.monotonic() - t0, 2)
        record["engine"], record["concurrency"] = getattr(backend, "engine", spec.backend), concurrency
        store.append(record)
        written += 1
        confs = [b["attc"]["confidence"] for b in record["tool"]["blocks"]]
        log(
            f"[calibrate] q{qid}: tool {record['tool']['answer']!r} "
            f"({'right' if record['tool']['correct'] else 'wrong'}, {len(record['tool']['calls'])} calls, "
            f"conf {', '.join('n/a' if c is None else f'{c:.3f}' for c in confs) or '-'}), "
            f"cot {record['cot']['answer']!r} ({'right' if record['cot']['correct'] else 'wrong'}), "
            + (
                f"continue {record['continue']['answer']!r} ({'right' if record['continue']['correct'] else 'wrong'}), "
                if "continue" in record
                else ""
            )
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
