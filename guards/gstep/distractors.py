"""The tool-use tax's semantic distractors (arXiv 2605.00136, section 2.1): each question rewritten
by a model with one distractor that must not change the answer, checked by text rules and, with a
judge, by asking it whether the answer stays (``answer_unchanged``, our prompt). ``--protocol
distractors`` writes them before the runs (guards.gstep.protocol). What they measure, the types,
the cache and which variants are left out: docs/papers/tool-use-tax.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from tuiagent import paths
from tuiagent.core.judge import Judge
from tuiagent.core.judge_prompts import UNPARSEABLE, prompt
from tuiagent.eval.datasets import Problem, numbers_in, with_variant
from tuiagent.safe_read import CONFIG_BYTES, read_text

DISTRACTOR_PREFIX = "distractor:"
# What the paper says each type does (section 2.1), and how it is made here. TB and PED: a sentence
# a model writes, inserted by insert_distractor. SP "paraphrases evidence while preserving meaning": a
# model rewrites one sentence of the question's evidence, and the rewrite takes that sentence's place.
# HU "adds hedging cues such as 'reportedly' to simulate uncertain information sources": no model, the
# cue goes before one sentence of the evidence (HEDGE). Before issue 42, SP added a restating sentence
# and HU a sentence doubting a number (prompt version 2): the paper's words describe neither.
DISTRACTORS: dict[str, str] = {
    "thematic": "thematic background: add one or two sentences of background about the story's setting or "
    "theme (history, place, people) that have nothing to do with the quantities asked about",
    "paraphrase": "semantic paraphrase: rewrite one sentence of the problem's evidence in other words",
    "parallel": "parallel entity: add one sentence about a similar person or object with its own numbers, which "
    "the question does not ask about",
    "hedged": "hedged uncertainty: a hedging cue ('Reportedly,') before one sentence of the problem's evidence",
}
# The version of the way each type is made, part of its cache key (2: the writer writes the added
# sentence alone; 3: SP rewrites a sentence of the evidence, HU is the cue, no model).
PROMPT_VERSIONS = {"thematic": 2, "parallel": 2, "paraphrase": 3, "hedged": 3}
HEDGE = "Reportedly,"  # [paper: section 2.1's example cue; the one cue, and where it goes, are ours]
# [ours] The paper's generation prompts (its Appendix K.1, Figures 5-8) are not in our copy. The
# writer is asked for the distractor alone and the sentence is inserted here (the paper: "the noise
# distribution is independent of the position", Appendix F.2): a small model asked to rewrite the
# whole problem verbatim returns it unchanged (the default model did so for 24 of 25 questions).
PROMPT = """Here is a math word problem:

{question}

Write what should be added to it: {description}. It must not change the correct answer, must not ask a question and must not solve the problem. Reply with the added text only."""
PARAPHRASE_PROMPT = """Here is a sentence from a math word problem:

{sentence}

Rewrite this sentence in other words, keeping its meaning and every number in it exactly as written. Reply with the rewritten sentence only."""


def distractor_prompt(question: str, kind: str) -> str:
    """What the writer is asked for a ``kind`` variant of ``question`` ("" for HU: no writer)."""
    if kind == "hedged":
        return ""
    if kind == "paraphrase":
        return PARAPHRASE_PROMPT.format(sentence=evidence_sentence(question, kind))
    return PROMPT.format(description=DISTRACTORS[kind], question=question.strip())


def _sentence_starts(text: str) -> list[int]:
    """Where the second, third, ... sentence of ``text`` begins ("Mr. Gardner" goes on)."""
    return [m.end() for m in _SENTENCE_END.finditer(text) if text[: m.start()].split()[-1] not in _ABBREVIATIONS]


def _spans(text: str) -> list[tuple[int, int]]:
    """Where each sentence of ``text`` lies (its spaces after it included), split where
    ``_sentence_starts`` says (not after "Mr.")."""
    cuts = [0, *_sentence_starts(text), len(text)]
    return list(zip(cuts, cuts[1:], strict=False))


def _sentences(text: str) -> list[str]:
    text = text.strip()
    return [text[a:b].strip() for a, b in _spans(text) if text[a:b].strip()]


def _pick(kind: str, text: str, n: int) -> int:
    """A place among ``n``, fixed by a hash of the question and the type [ours]."""
    return int(hashlib.sha1(f"{kind}\n{text}".encode()).hexdigest(), 16) % n


def _evidence_span(question: str, kind: str) -> tuple[int, int]:
    """Where one sentence of the question's evidence lies: a sentence before the last one (the last
    asks the question), chosen by ``_pick``; the only sentence of a one-sentence question."""
    text = question.strip()
    spans = _spans(text)
    return spans[_pick(kind, text, max(len(spans) - 1, 1))]


def evidence_sentence(question: str, kind: str) -> str:
    """The sentence of the evidence a ``kind`` variant changes (SP's rewrite, HU's cue)."""
    a, b = _evidence_span(question, kind)
    return question.strip()[a:b].strip()


# Words that lose their capital after the cue ("Reportedly, the shop..."); a name keeps it. [ours]
_LOWERED = frozenset(
    "a an the he she it they there this that these those his her their its each every some one two in on at "
    "for after before when if last during what how which who".split()
)


def hedge(question: str) -> str:
    """HU: HEDGE before one sentence of the evidence; the question's text otherwise as it is."""
    text = question.strip()
    a, b = _evidence_span(text, "hedged")
    sentence = text[a:b]
    first = sentence.split(maxsplit=1)[0] if sentence.split() else ""
    if first.lower().strip(",") in _LOWERED:
        sentence = sentence[0].lower() + sentence[1:]
    return f"{text[:a]}{HEDGE} {sentence}{text[b:]}"


def replace_evidence(question: str, rewrite: str) -> str:
    """SP: ``rewrite`` in the place of the sentence ``evidence_sentence`` names (the spaces after it kept)."""
    text = question.strip()
    if not rewrite:
        return text
    a, b = _evidence_span(text, "paraphrase")
    sentence = text[a:b]
    return f"{text[:a]}{rewrite}{sentence[len(sentence.rstrip()) :]}{text[b:]}"


def _clean(text: str) -> str:
    """The writer's added text: its first paragraph, without a label or quotes around it."""
    text = text.strip()
    for prefix in ("Added text:", "Added sentence:", "Sentence:", "Distractor:"):
        if text.lower().startswith(prefix.lower()):
            text = text[len(prefix) :].strip()
    return _flat(text.split("\n\n", 1)[0]).strip('"').strip()


_SENTENCE_END = re.compile(r"(?<=[.?!])\s+")
_ABBREVIATIONS = {
    "Mr.",
    "Mrs.",
    "Ms.",
    "Dr.",
    "Prof.",
    "St.",
    "Jr.",
    "Sr.",
    "vs.",
    "etc.",
    "e.g.",
    "i.e.",
    "a.m.",
    "p.m.",
}


def _flat(text: str) -> str:
    return " ".join(text.split())


def insert_distractor(question: str, added: str, kind: str) -> str:
    """``question`` with ``added`` before one of its sentences after the first (the last one, the
    question, included), at a place fixed by a hash of the question and the type [ours]; before a
    one-sentence question. The question's own text is kept as it is, spaces included."""
    text = question.strip()
    if not added:
        return text
    starts = _sentence_starts(text)
    at = starts[_pick(kind, text, len(starts))] if starts else 0
    return f"{text[:at]}{added} {text[at:]}"


_STEP_RESULT = re.compile(r"<<[^<>]*=\s*([^<>]+?)\s*>>")


def solution_values(gold: str, reference: str = "") -> set[float]:
    """The values a problem's solution reaches: its gold answer and, in a GSM8K worked answer, the
    result of each calculator annotation (``<<48/2=24>>``)."""
    found = numbers_in(gold) + [n for r in _STEP_RESULT.findall(reference) for n in numbers_in(r)]
    return {float(n) for n in found}


def valid_variant(original: str, variant: str, solved: Collection[float] = (), changed: str = "") -> tuple[bool, str]:
    """A variant keeps the question's numbers and every one of its sentences as written (but
    ``changed``, the one SP rewrites and HU hedges), adds or changes text, asks nothing more and,
    given ``solved`` (``solution_values``), states no value of the solution that the question does not
    (the writing prompt's "must not solve the problem" [ours: the check]); (ok, why not). Whether the
    answer is unchanged is the judge's question (check_answers_unchanged, below)."""
    if changed and (not variant or _flat(variant) == _flat(original)):
        return False, "the sentence came back as written"
    if not changed and (not variant or len(variant) <= len(original.strip())):
        return False, "no text was added"
    missing = [n for n in dict.fromkeys(numbers_in(original)) if n not in numbers_in(variant)]
    if missing:
        return False, f"numbers of the question missing: {', '.join(missing[:5])}"
    flat = _flat(variant)
    lost = [s for s in _sentences(original) if _flat(s) not in flat and _flat(s) != _flat(changed)]
    if lost:
        return False, f"a sentence of the question was changed or left out: {lost[0][:80]!r}"
    if variant.count("?") > original.count("?"):
        return False, "the added text asks a question"
    given = {float(n) for n in numbers_in(original)}
    told = [n for n in numbers_in(variant) if float(n) in solved and float(n) not in given]
    if told:
        return False, f"the added text states a value of the solution ({told[0]})"
    return True, ""


def cache_dir(model_id: str) -> Path:
    return paths.cache_dir() / "eval" / "distractors" / model_id


def cache_file(model_id: str, question: str, kind: str) -> Path:
    digest = hashlib.sha1(f"{PROMPT_VERSIONS[kind]}\n{kind}\n{question}".encode()).hexdigest()[:16]
    return cache_dir(model_id) / f"{kind}-{digest}.json"


def _entry(model: str, question: str, kind: str, prompt: str, reply: str, added: str) -> dict[str, Any]:
    """A variant's record: how it was made and what it is."""
    changed = evidence_sentence(question, kind) if kind in ("paraphrase", "hedged") else ""
    if kind == "hedged":
        variant = hedge(question)
    elif kind == "paraphrase":
        variant = replace_evidence(question, added)
    else:
        variant = insert_distractor(question, added, kind)
    ok, why = valid_variant(question, variant, changed=changed)
    return {
        "model": model,
        "kind": kind,
        "prompt_version": PROMPT_VERSIONS[kind],
        "prompt": prompt,
        "question": question,
        "reply": reply,
        "added": added,
        "changed": changed,
        "variant": variant,
        "valid": ok,
        "invalid_reason": why,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def hedged_entry(question: str) -> dict[str, Any]:
    """HU's variant of ``question``: made by rule, no model asked."""
    return _entry("rule", question, "hedged", "", "", HEDGE)


async def generate_distractor(backend: Any, question: str, kind: str, *, max_tokens: int = 128) -> dict[str, Any]:
    """Ask the model for one variant (greedy). Returns the cache entry (not yet written)."""
    from tuiagent.protocol import Sampling

    prompt = distractor_prompt(question, kind)
    rendered = backend.render_chat([{"role": "user", "content": prompt}])
    pieces = [t.text async for t in backend.stream(rendered, Sampling(temperature=0.0, max_tokens=max_tokens), [])]
    reply = "".join(pieces)
    return _entry(backend.model_id, question, kind, prompt, reply, _clean(reply))


async def distractor_variants(
    problems: list[Problem],
    kinds: list[str],
    *,
    model_id: str,
    backend_factory: Callable[[], Any],
    close_backend: bool = True,
    on_progress: Callable[[int, int], None] | None = None,
    log: Callable[[str], None] = lambda m: None,
) -> tuple[list[Problem], list[dict[str, Any]]]:
    """The distractor variants of ``problems`` (valid ones), generating what the cache lacks with a
    backend from ``backend_factory`` (called only when something is missing; the backend is closed
    after unless ``close_backend`` is false, e.g. when it is the eval's own).
    Returns (variants, invalid cache entries)."""
    todo = [(p, k) for p in problems for k in kinds]
    missing = [(p, k) for p, k in todo if k != "hedged" and not cache_file(model_id, p.question, k).exists()]
    backend = None
    if missing:
        log(f"generating {len(missing)} distractor variant(s) with {model_id} (cached in {cache_dir(model_id)})")
        backend = backend_factory()
    variants: list[Problem] = []
    invalid: list[dict[str, Any]] = []
    try:
        for n, (problem, kind) in enumerate(todo, start=1):
            path = cache_file(model_id, problem.question, kind)
            if kind == "hedged":
                entry = hedged_entry(problem.question)
            elif path.exists():
                entry = json.loads(read_text(path, limit=CONFIG_BYTES, what="cached variant"))
            else:
                entry = await generate_distractor(backend, problem.question, kind)
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(entry, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
                tmp.replace(path)
            if on_progress:
                on_progress(n, len(todo))
            solved = solution_values(problem.gold, problem.reference)
            variant = str(entry.get("variant") or "")
            ok, why = valid_variant(
                problem.question, variant, solved, str(entry.get("changed") or "")
            )  # today's checks
            if ok:
                variants.append(
                    with_variant(
                        problem,
                        DISTRACTOR_PREFIX + kind,
                        entry["variant"],
                        distractor=kind,
                        generated_by=entry["model"],
                        cache="" if kind == "hedged" else str(path),
                        clean_question=problem.question,
                    )
                )
            else:
                invalid.append(
                    {
                        "dataset": problem.dataset,
                        "id": problem.id,
                        "variant": DISTRACTOR_PREFIX + kind,
                        "kind": kind,
                        "why": why,
                        "cache": str(path),
                    }
                )
    finally:
        if backend is not None and close_backend:
            await backend.aclose()
    return variants, invalid


# -- the judge's check ----------------------------------------------------------------------------

ANSWER_UNCHANGED = prompt("answer_unchanged")


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
                    "variant": v.variant,
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
