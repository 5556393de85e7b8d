"""The necessity of a tool call as the eval's judge reads it ("Spurious Tool Use", arXiv 2609.16268,
Appendix A.3): the paper's prompt (the one the necessity guard's model judge asks, read by the
guard's reader) and its answer-correctness prompt, the cue probe's questions and the judge's
verdicts per run; registered with the
judge through the ``tuiagent.judge_prompts`` entry point."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from guards.necessity.guard import PAPER_PROMPT, TOOL_TYPE, read_paper_reply
from tuiagent.core import judge_schemas
from tuiagent.core.judge_prompts import UNPARSEABLE, JudgePrompt, json_object
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


def parse_correctness(reply: JudgeReply) -> Any:
    """true / false from the JSON's "true_false" boolean."""
    data = json_object(reply.text)
    verdict = None if data is None else data.get("true_false")
    return verdict if isinstance(verdict, bool) else UNPARSEABLE


# [paper] "Spurious Tool Use" (arXiv 2609.16268), Appendix A.3, "Answer correctness judge", verbatim.
CORRECTNESS_PROMPT = (
    "You are an evaluator. Determine whether the Model Response’s final answer matches the Ground Truth. "
    "Instructions: 1. Extract the final answer from the Model Response. Ignore reasoning and intermediate steps. "
    "Use the last explicit answer given. 2. Normalize before comparison: - Numbers: ignore commas and trailing "
    "zeros; treat decimals and fractions as equivalent (0.5 = 1/2). - Text: ignore case, punctuation, and extra "
    "whitespace. - Math: algebraically equivalent expressions count as equal; order does not matter for "
    "sets/tuples. - Multiple choice: accept either the option letter or the option text. - Ignore units unless "
    "they change the meaning. 3. Return true only if the final answers are mathematically or semantically "
    "equivalent. If no clear final answer is present, return false. Question: {question} Model Response: "
    '{response_str} Ground Truth: {ground_truth} Output JSON: {{"analysis": "brief explanation", '
    '"true_false": true or false}}'
)


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
PROMPTS = (
    NECESSITY,
    JudgePrompt(
        "correctness",
        1,
        CORRECTNESS_PROMPT,
        "[paper] Spurious Tool Use, Appendix A.3, answer correctness judge",
        parse_correctness,
        256,
        ("question", "response_str", "ground_truth"),
        schema=judge_schemas.CORRECTNESS,
    ),
)


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
