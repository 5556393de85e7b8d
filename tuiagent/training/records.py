"""The records a collection writes, one JSON line per question, whatever fits them: the compact form
of a run's events, the questions of a GSM8K-style file, and the model-checked records file to resume.
G-STEP's collection writes v1 records (``guards.gstep.training``), ``tuiagent calibrate`` v2 ones
(``calibrate_collect``; the format in docs/calibration.md, "The records")."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tuiagent.core.jsonl_store import JsonlStore
from tuiagent.parsing import gsm8k_gold
from tuiagent.safe_read import DATA_BYTES, read_text


def run_part(events: Sequence[Any], *, full: bool) -> dict[str, Any]:
    """The compact form of one run's events (tuiagent.core.events objects)."""
    from tuiagent.core import events as ev

    started = next(e for e in events if isinstance(e, ev.RunStarted))
    finished = next(e for e in reversed(events) if isinstance(e, ev.RunFinished))
    part: dict[str, Any] = {
        "answer": finished.answer,
        "correct": finished.correct,
        "reason": finished.reason,
        "wall_s": finished.wall_s,
        "generated_tokens": finished.generated_tokens,
    }
    if not full:
        return part
    codes = {e.call: e.code for e in events if isinstance(e, ev.CodeBlock)}
    calls = [
        [codes.get(e.call, ""), e.shown, bool(e.error or e.timed_out), bool(e.executed)]
        for e in events
        if isinstance(e, ev.ToolResult)
    ]
    turns = [{"text": e.text, "stop": e.stop} for e in events if isinstance(e, ev.TurnEnded)]
    part.update(
        {
            "max_tool_calls": int(started.settings.get("max_tool_calls", 4)),
            "first_call": str(started.settings.get("first_call", "free")),
            "calls": calls,  # [code, shown output, error (exception or timeout), executed]
            "turns": turns,
            "final_text": turns[-1]["text"] if turns else "",
            "erroneous_calls": finished.erroneous_calls,
        }
    )
    return part


def record_from_events(
    qid: int,
    question: str,
    gold: str,
    model: str,
    tool_events: Sequence[Any],
    cot_events: Sequence[Any],
    *,
    version: int,
) -> dict[str, Any]:
    """One compact record per question::

        {"v": version, "qid": line index in the data file, "question", "gold", "model",
         "tool": {answer, correct, reason (how the run ended), wall_s, generated_tokens,
                  max_tool_calls, first_call ("required": the run began with a tool call),
                  calls: [[code, shown output, error, executed], ...],
                  turns: [{"text", "stop"}, ...], final_text (the last turn's text), erroneous_calls},
         "cot": {answer, correct, reason, wall_s, generated_tokens}}

    Turn texts only, no tokens or log-probabilities.
    """
    return {
        "v": version,
        "qid": int(qid),
        "question": question,
        "gold": gold,
        "model": model,
        "tool": run_part(tool_events, full=True),
        "cot": run_part(cot_events, full=False),
    }


def load_records(path: Path) -> list[dict[str, Any]]:
    """Records of a JSONL file (a ``core.jsonl_store.JsonlStore``: a line cut short by a kill is skipped)."""
    return JsonlStore(path).records


def read_questions(path: Path, start: int, n: int) -> list[tuple[int, str, str]]:
    """(question id = 0-based line index, question, gold) for lines start .. start+n-1."""
    out = []
    lines = read_text(path, limit=DATA_BYTES, what="dataset").split("\n")
    for i, line in enumerate(lines[start : start + n], start=start):
        if not line and i == len(lines) - 1:  # after the last line's newline
            break
        item = json.loads(line)
        gold = gsm8k_gold(str(item.get("answer", "")))
        if gold is None or "question" not in item:
            raise ValueError(f"{path}:{i + 1}: a GSM8K line has a 'question' and an 'answer' ending in '#### <number>'")
        out.append((i, item["question"], gold))
    return out


def open_records(records: Path, model: str, what: str) -> JsonlStore:
    """The records file to resume, whose records must all be runs of ``model`` (``what`` is
    model-specific: one records file per model)."""
    store = JsonlStore(records, key="qid")
    others = sorted({str(r.get("model")) for r in store.records} - {model})
    if others:
        raise ValueError(
            f"{records} holds runs of {', '.join(others)}, not {model}: {what} is model-specific, "
            "use one records file per model"
        )
    return store


def scratch_dir(collection: str, model: str) -> Path:
    """Where a collection's trajectories go (the user data dir: they are scratch, the records are the result)."""
    from tuiagent import paths

    return paths.data_dir() / collection / model
