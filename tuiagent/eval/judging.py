"""The eval's judge (``tuiagent eval --judge MODEL``): the judge model chosen and checked at start,
its judgements of an eval's runs cached in ``<eval dir>/judgements.jsonl`` (resumable, like the
runs), and what they cost, for the report.

A pass asks a list of questions (a registered prompt and its inputs) and caches each answer. What
each protocol asks is its own (``eval.protocols``: the cue probe's necessity of each call, ATTC's
audits, the TIM metrics, the tool-use tax's A-F taxonomy and, before any run, whether each of its
semantic-distractor variants keeps its answer). Each pass goes through ``with_judge`` or ``judge_eval``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from tuiagent.core.judge import Judge, JudgeModels, answering, judge_model, key_of
from tuiagent.core.judge_prompts import UNPARSEABLE, JudgePrompt, prompt
from tuiagent.core.judge_store import JudgementStore


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


Item = tuple[JudgePrompt, dict[str, str]]  # one question: a registered prompt and its inputs


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
