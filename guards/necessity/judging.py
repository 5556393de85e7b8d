"""The necessity of a tool call as the eval's judge reads it ("Spurious Tool Use", arXiv 2609.16268,
Appendix A.3): the paper's prompt (the one the necessity guard's model judge asks, read by the
guard's reader), the cue probe's questions and the judge's verdicts per run; registered with the
judge through the ``tuiagent.judge_prompts`` entry point."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from guards.necessity.guard import PAPER_PROMPT, TOOL_TYPE, read_paper_reply
from tuiagent.core import judge_schemas
from tuiagent.core.judge_prompts import UNPARSEABLE, JudgePrompt
from tuiagent.core.judge_store import JudgementStore
from tuiagent.core.steps import run_pieces
from tuiagent.eval.judging import Item, judged
from tuiagent.eval.results import question_of, run_events
from tuiagent.protocol import JudgeReply


def parse_necessity(reply: JudgeReply) -> Any:
    """{"necessary", "p_unnecessary", "logprob", "reason"} by the necessity guard's own reader."""
    read = read_paper_reply(reply)
    if read is None:
        return UNPARSEABLE
    necessary, p, lp, reason = read
    return {"necessary": necessary, "p_unnecessary": p, "logprob": lp, "reason": reason}


NECESSITY = JudgePrompt(
    "necessity",
    1,
    PAPER_PROMPT,
    "[paper] Spurious Tool Use, Appendix A.3, tool necessity judge",
    parse_necessity,
    128,
    ("question", "tool_type", "tool_content"),
    schema=judge_schemas.NECESSITY,
)
PROMPTS = (NECESSITY,)


def executed_calls(record: dict[str, Any]) -> tuple[str, list[str]] | None:
    """(the question the run saw, the code of its executed calls) from its trajectory; None without one."""
    events = run_events(record)
    if events is None:
        return None
    return question_of(events), [p.text for p in run_pieces(events) if p.kind == "code" and p.executed]


def necessity_inputs(question: str, code: str) -> dict[str, str]:
    return {"question": question.strip(), "tool_type": TOOL_TYPE, "tool_content": code.strip()}


def cue_probe_runs(records: Iterable[dict[str, Any]], tool_settings: set[str]) -> list[dict[str, Any]]:
    """The runs the cue probe's judge subset needs: tool settings' runs of the items that have a cue variant."""
    records = list(records)
    cued = {(r["dataset"], r["problem_id"]) for r in records if str(r.get("variant", "")).startswith("cue:")}
    return [r for r in records if r["setting"] in tool_settings and (r["dataset"], r["problem_id"]) in cued]


def necessity_items(records: Iterable[dict[str, Any]]) -> Iterator[Item]:
    """The cue probe's questions: the necessity of each executed call of ``records``."""
    for record in records:
        calls = executed_calls(record)
        if calls is not None:
            question, codes = calls
            yield from ((NECESSITY, necessity_inputs(question, code)) for code in codes)


def call_verdicts(records: Iterable[dict[str, Any]], store: JudgementStore, judge: str) -> dict[str, list[Any]]:
    """Per run key, the judge's value for each executed call (None where it was not judged)."""
    out: dict[str, list[Any]] = {}
    for record in records:
        calls = executed_calls(record)
        if calls is None:
            continue
        question, codes = calls
        out[record["key"]] = [judged(store, judge, NECESSITY, necessity_inputs(question, c)) for c in codes]
    return out


def needed(values: list[Any]) -> bool | None:
    """Whether the judge calls any of a run's calls necessary: True, False, or None when one is
    unparseable or not judged (the run says nothing sure)."""
    if any(v is None or v == UNPARSEABLE for v in values):
        return None
    return any(v["necessary"] for v in values)
