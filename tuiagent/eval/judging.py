"""The eval's judge (``tuiagent eval --judge MODEL``): the judge model chosen and checked at start,
its judgements of an eval's runs cached in ``<eval dir>/judgements.jsonl`` (resumable, like the
runs), and what they cost, for the report.

A pass asks a list of questions (a registered prompt and its inputs) and caches each answer; what is
asked: each executed call of the cue probe's tool runs, with the tool-necessity prompt of "Spurious
Tool Use" (Appendix A.3), for the probe's "judge calls no call necessary" items (the judge sees the
question as the run saw it, cue included, as the necessity guard's judge does [ours]); and, with
``--attc-audit``, ATTC's audits of whole runs (``eval.attc_audit``); and the TIM protocol's runs
(``eval.tim_protocol.judge_tim``); before any run, whether each semantic-distractor variant keeps
its answer (``answer_unchanged``, our prompt): a variant the judge says changes it is left out, as
one that lost a number is; and after the runs, with the tool-use-tax conditions, the A-F taxonomy's
judged parts (our prompts): the gold steps of a reference without GSM8K's annotations (Type A) and
whether a Type F run's plan is coherent but wrong. Each pass goes through ``with_judge``.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from guards.necessity import TOOL_TYPE
from tuiagent.core.judge import Judge, JudgeModels, answering, judge_model, key_of
from tuiagent.core.judge_prompts import UNPARSEABLE, JudgePrompt, prompt
from tuiagent.core.judge_store import JudgementStore
from tuiagent.core.steps import run_pieces
from tuiagent.eval.results import question_of, run_events
from tuiagent.eval.tooltax import (
    CHAIN,
    TOOL_CONDITIONS,
    Judged,
    condition_settings,
    gold_steps,
    load_pieces,
    plan_inputs,
    scopes,
    symptoms,
)

NECESSITY = prompt("necessity")
ANSWER_UNCHANGED = prompt("answer_unchanged")
GOLD_STEPS = prompt("gold_steps")
PLAN_MISMATCH = prompt("plan_mismatch")


def same_model_warning(judge: str, model: str) -> str | None:
    """The loud line when the judge is the model under test (it grades its own runs)."""
    if judge_model(judge)[0] != model:
        return None
    return (
        f"WARNING: the judge is the model under test ({model}): it grades its own runs; pass another "
        "models.toml model with --judge for an independent judge"
    )


def check_judge(judge: str, model: str, models_file: Path | None, log: Callable[[str], None]) -> None:
    """At start: an unknown judge id is a ConfigError; the model under test as judge is said loudly."""
    JudgeModels(models_file).spec(judge_model(judge)[0])
    warning = same_model_warning(judge, model)
    if warning:
        log(warning)


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


Item = tuple[JudgePrompt, dict[str, str]]  # one question: a registered prompt and its inputs


def necessity_items(records: Iterable[dict[str, Any]]) -> Iterator[Item]:
    """The cue probe's questions: the necessity of each executed call of ``records``."""
    for record in records:
        calls = executed_calls(record)
        if calls is not None:
            question, codes = calls
            yield from ((NECESSITY, necessity_inputs(question, code)) for code in codes)


async def judge_items(
    judge: Judge, items: Iterable[Item], log: Callable[[str], None], what: str = "question(s)"
) -> int:
    """Ask the judge every question of ``items`` not yet in its cache (its concurrency in flight); how
    many were asked (logged as "N ``what`` judged")."""
    before = judge.cost.calls
    await judge.judgements(items)
    asked = judge.cost.calls - before
    if asked:
        log(f"judge {judge.model_id}: {asked} {what} judged")
    return asked


async def with_judge(
    judge_id: str,
    models_file: Path | None,
    directory: Path,
    work: Callable[[Judge], Awaitable[Any]],
    *,
    models: JudgeModels | None = None,
    concurrency: int = 1,
) -> Any:
    """A judging pass after an eval's runs: ``work`` asks a judge cached in ``directory``'s
    judgements.jsonl (what the cache holds is not asked again); what ``work`` returns. The judge
    model is ``models``' (its owner closes it: several passes share one load), else opened for this
    pass, with ``concurrency`` judgements in flight, and closed after it."""
    owned = models is None
    opened = JudgeModels(models_file, concurrency=concurrency) if models is None else models
    store = JudgementStore(directory)
    try:
        return await work(Judge(judge_id, models=opened, store=store))
    finally:
        store.close()
        if owned:
            await opened.aclose()


async def judge_eval(
    judge_id: str,
    models_file: Path | None,
    directory: Path,
    items: Iterable[Item],
    log: Callable[[str], None],
    what: str = "question(s)",
    *,
    models: JudgeModels | None = None,
    concurrency: int = 1,
) -> None:
    """A judging pass after an eval's runs: the questions of ``items`` not yet in ``directory``'s cache."""
    await with_judge(
        judge_id,
        models_file,
        directory,
        lambda judge: judge_items(judge, items, log, what),
        models=models,
        concurrency=concurrency,
    )


def judged(store: JudgementStore, judge: str, question: JudgePrompt, inputs: dict[str, str]) -> Any:
    """The judge's cached value for one question; None when it was not judged."""
    return (store.get(key_of(judge, question, inputs)) or {}).get("value")


def taxonomy_judged(store: JudgementStore, judge: str) -> Judged:
    """The judge's cached answers for the A-F taxonomy (eval.tooltax), looked up by their inputs."""
    return Judged(
        steps=lambda reference: judged(store, judge, GOLD_STEPS, {"reference": reference}),
        plan=lambda inputs: judged(store, judge, PLAN_MISMATCH, inputs),
    )


async def judge_taxonomy(
    judge: Judge,
    records: list[dict[str, Any]],
    names: list[str],
    conditions: dict[str, str | None],
    log: Callable[[str], None],
) -> int:
    """With the whole degradation chain among the settings (``--protocol tooltax``), the taxonomy's
    judged parts, per dataset on the tool-use-tax section's main scope (the pooled
    distractor variants, or the clean questions): the gold steps of each failed tool run's reference
    that has no GSM8K annotations, then the plan of each wrong Agent-Full run that is Type F by
    elimination. How many questions were asked (not cached)."""
    which = condition_settings(names, conditions)
    if not all(c in which for c in CHAIN) or judge.store is None:  # only an eval of the whole chain
        return 0
    tool = {which[c] for c in TOOL_CONDITIONS if c in which}
    before = judge.cost.calls
    for dataset in sorted({r["dataset"] for r in records}):
        mine = [r for r in records if r["dataset"] == dataset]
        keep = next(iter(scopes(mine)[1].values()))
        failed = [r for r in mine if keep(r) and r["setting"] in tool and r.get("correct") is not True]
        for reference in sorted({str(r.get("reference") or "") for r in failed}):
            if reference.strip() and gold_steps(reference) is None:
                await judge.single(GOLD_STEPS, reference=reference)
        judged = taxonomy_judged(judge.store, judge.name)
        for r in failed:
            pieces = load_pieces(r) if r["setting"] == which["full"] else None
            if pieces is None:
                continue
            s = symptoms(
                pieces,
                gold=str(r.get("gold", "")),
                question=str(r.get("question") or ""),
                clean_question=str(r.get("clean_question") or ""),
                reference=str(r.get("reference") or ""),
                judged=judged,
            )
            if s["dominant"] == "F":
                await judge.single(PLAN_MISMATCH, **plan_inputs(r, pieces))
    asked = judge.cost.calls - before
    if asked:
        log(f"judge {judge.model_id}: {asked} question(s) for the A-F taxonomy")
    return asked


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


def judge_cost(store: JudgementStore, judge: str) -> dict[str, Any]:
    """The cost of every judgement ``judge`` made for this eval, from its cache records."""
    mine = [r for r in store.latest.values() if r.get("judge") == answering(judge, prompt(r["prompt"]))]
    per_prompt: dict[str, dict[str, int]] = {}
    for r in mine:
        counts = per_prompt.setdefault(r["prompt"], {"judged": 0, "unparseable": 0})
        counts["judged"] += 1
        counts["unparseable"] += r["value"] == UNPARSEABLE
    return {
        "judge": judge,
        "judgements": len(mine),
        "prompts": per_prompt,
        "prompt_tokens": sum(r["prompt_tokens"] for r in mine),
        "generated_tokens": sum(r["generated_tokens"] for r in mine),
        "seconds": round(sum(r["seconds"] for r in mine), 2),
    }


def judge_summary(store: JudgementStore, judge: str, model: str) -> dict[str, Any]:
    """What the report says of a judge: its cost, with the warning when it is the model under test."""
    return judge_cost(store, judge) | {"warning": same_model_warning(judge, model)}


async def check_answers_unchanged(
    judge: Judge, variants: list[Any], log: Callable[[str], None]
) -> tuple[list[Any], list[dict[str, Any]], dict[str, Any]]:
    """The distractor variants (``Problem``s with a ``clean_question``) whose answer the judge says is
    unchanged; those it says change it, as invalid entries; and the tally for the report. A reply
    that does not parse keeps the variant and is counted (the check says nothing about it). The tally
    also gives the mean probability the judge gave its reply's first token (``reply_p``; None without
    log-probabilities): near 0.5, its yes and no are a coin flip."""
    kept, dropped = [], []
    unparseable = 0
    sure: list[float] = []
    asked = [
        (ANSWER_UNCHANGED, {"original": str(v.meta["clean_question"]), "variant": v.question, "answer": v.gold})
        for v in variants
    ]
    for v, record in zip(variants, await judge.judgements(asked)):
        value = record["value"]
        first = (record.get("tokens") or [[None, None]])[0]
        if first[1] is not None:
            sure.append(math.exp(first[1]))
        if value is False:
            dropped.append(
                {
                    "dataset": v.dataset,
                    "id": v.id,
                    "kind": str(v.meta.get("distractor", v.variant)),
                    "why": f"the judge {judge.model_id} says the answer changes",
                    "cache": v.meta.get("cache"),
                }
            )
            continue
        unparseable += value == UNPARSEABLE
        kept.append(v)
    if variants:
        log(
            f"judge {judge.model_id}: {len(dropped)} of {len(variants)} distractor variant(s) change the answer "
            f"(left out); {unparseable} repl(ies) unparseable (kept)"
        )
    return (
        kept,
        dropped,
        {
            "judge": judge.model_id,
            "judged": len(variants),
            "changed": len(dropped),
            "unparseable": unparseable,
            "reply_p": round(sum(sure) / len(sure), 3) if sure else None,
        },
    )
