"""Problems with gold answers, from JSONL files in the common shapes, the built-in demo set or the HF hub.

Shapes recognised per line (field names can be overridden):

- GSM8K: ``question`` and ``answer`` whose last line is ``#### N`` (the gold is N, commas removed);
- MATH / MATH-500: ``problem`` and ``answer``, or ``problem`` and ``solution`` with a ``\\boxed{}``
  answer (the last one);
- AIME-style: ``problem``, ``answer`` (a number) and ``id``;
- PyMath-shaped: ``problem``, ``answer`` and a step-by-step ``solution``.

Each problem keeps its reference solution when the file has one (``Problem.reference``), for the
judge's reference-based metrics: GSM8K's worked answer (the text before ``####``), a MATH or PyMath
``solution``, or a ``reference_solution`` / ``gold_solution`` field.

The id of a problem is its ``id`` / ``unique_id`` / ``problem_id`` field when there is one, else its
line number (from 1) in the file. Ids are what resumption keys on: keep files append-only, or give ids.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tuiagent.errors import UserError
from tuiagent.parsing import final_answer, gsm8k_gold
from tuiagent.safe_read import DATA_BYTES, json_loads, read_text

DEMO = "demo"
QUESTION_FIELDS = ("question", "problem", "prompt", "input")
ANSWER_FIELDS = ("answer", "final_answer", "target", "solution")
ID_FIELDS = ("id", "unique_id", "problem_id", "idx", "qid")
REFERENCE_FIELDS = ("solution", "reference_solution", "gold_solution")  # [ours] the last two: other files' names


class DatasetError(UserError):
    """A dataset that cannot be read; the message names the file, the line and the fix."""


@dataclass(frozen=True)
class Problem:
    """One question with its gold answer. ``variant`` is "" for the question as written, else the
    name of the transformation that made ``question`` (a distractor type or a cue)."""

    dataset: str
    id: str
    question: str
    gold: str
    variant: str = ""
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    reference: str = field(default="", compare=False)  # the worked solution, when the dataset gives one

    @property
    def unit(self) -> str:
        """The problem as a statistical unit: its id and variant."""
        return f"{self.id}~{self.variant}" if self.variant else self.id

    def question_hash(self) -> str:
        return hashlib.sha1(self.question.encode("utf-8")).hexdigest()[:10]


@dataclass(frozen=True)
class Fields:
    """Field names to read; None means: detect from the common shapes."""

    question: str | None = None
    answer: str | None = None
    id: str | None = None


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def parse_record(data: dict[str, Any], fields: Fields = Fields()) -> tuple[str, str, str | None]:
    """(question, gold, id or None) from one record; ValueError says what is missing."""
    qkey = fields.question or next((k for k in QUESTION_FIELDS if k in data), None)
    if qkey is None or qkey not in data:
        raise ValueError(f"no question field (looked for {fields.question or ', '.join(QUESTION_FIELDS)})")
    question = _text(data[qkey])
    if fields.answer:
        akeys = [fields.answer]
    else:
        akeys = [k for k in ANSWER_FIELDS if k in data and k != qkey]
    gold = None
    for akey in akeys:
        if akey not in data or data[akey] is None:
            continue
        raw = _text(data[akey])
        if "####" in raw:  # GSM8K
            gold = gsm8k_gold(raw)
        elif "\\boxed" in raw or "\\fbox" in raw:  # a MATH solution (or a boxed answer)
            gold = final_answer(raw)
        elif akey == "solution" and not fields.answer:
            continue  # a solution without a boxed answer is no gold
        else:
            gold = raw
        if gold:
            break
    if not gold:
        raise ValueError(
            f"no gold answer (looked for {fields.answer or ', '.join(ANSWER_FIELDS)}; "
            "GSM8K answers end with '#### N', MATH solutions need a \\boxed{} answer)"
        )
    ikey = fields.id or next((k for k in ID_FIELDS if k in data), None)
    pid = _text(data[ikey]) if ikey and ikey in data and data[ikey] is not None else None
    if not question:
        raise ValueError("the question is empty")
    return question, gold, pid


def reference_solution(data: dict[str, Any], fields: Fields = Fields()) -> str:
    """The record's reference solution: a solution field, or a GSM8K answer's text before ``####``; "" when none."""
    for key in REFERENCE_FIELDS:
        if isinstance(data.get(key), str) and data[key].strip():
            return str(data[key]).strip()
    answer = data.get(fields.answer or "answer")
    if isinstance(answer, str) and "####" in answer:
        return answer.rsplit("####", 1)[0].strip()
    return ""


def load_jsonl(path: Path | str, *, name: str | None = None, fields: Fields = Fields()) -> list[Problem]:
    """Problems from a JSONL file; ``name`` (default: the file's stem) names the dataset in results."""
    path = Path(path).expanduser()
    # "\n" only: U+2028 and other separators str.splitlines() breaks on may sit inside a JSON string
    lines = read_text(path, limit=DATA_BYTES, what="dataset").split("\n")
    name = name or path.stem
    problems, seen = [], set()
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json_loads(line)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            question, gold, pid = parse_record(data, fields)
        except (json.JSONDecodeError, ValueError) as e:
            raise DatasetError(
                f'{path}:{n}: {e}\n  fix: one JSON object a line, e.g. GSM8K {{"question", "answer": '
                f'"... #### 42"}}, MATH {{"problem", "solution" or "answer"}}, AIME {{"problem", '
                f'"answer", "id"}}; or name the fields with --question-field/--answer-field/--id-field'
            ) from None
        pid = pid or str(n)
        if pid in seen:
            raise DatasetError(
                f"{path}:{n}: the id {pid!r} appears twice; ids must be unique (results are keyed by them)"
            )
        seen.add(pid)
        problems.append(
            Problem(
                name,
                pid,
                question,
                gold,
                meta={k: v for k, v in data.items() if k in ("kind", "level", "type", "subject")},
                reference=reference_solution(data, fields),
            )
        )
    if not problems:
        raise DatasetError(f"{path} holds no problems")
    return problems


def demo_path() -> Path:
    return Path(str(importlib.resources.files("tuiagent.eval") / "demo.jsonl"))


def load_demo() -> list[Problem]:
    """The built-in demo set: 12 problems written and checked by the team (word problems and
    problems where code helps: counting, modular arithmetic, primes)."""
    return load_jsonl(demo_path(), name=DEMO)


def load_hf(spec: str, fields: Fields = Fields()) -> list[Problem]:
    """``NAME[:CONFIG][:SPLIT]`` from the Hugging Face hub with the ``datasets`` package (online only)."""
    parts = spec.split(":")
    name, config = parts[0], (parts[1] or None) if len(parts) > 1 else None
    split = parts[2] if len(parts) > 2 and parts[2] else "test"
    try:
        import datasets  # type: ignore[import-not-found]
    except ImportError:
        raise DatasetError(
            f"loading hf:{spec} needs the 'datasets' package and a network connection\n"
            "  fix: pip install datasets (while online), or export the split to JSONL and pass the file"
        ) from None
    try:
        rows = datasets.load_dataset(name, config, split=split)
    except Exception as e:  # offline, unknown name, missing config: one readable message
        raise DatasetError(
            f"cannot load hf:{spec} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no detail'})\n"
            "  fix: check the name, config and split while online; offline, pass a JSONL file instead"
        ) from None
    label = name.rsplit("/", 1)[-1] + (f"-{config}" if config else "") + f"-{split}"
    problems = []
    for n, data in enumerate(rows, start=1):
        try:
            question, gold, pid = parse_record(dict(data), fields)
        except ValueError as e:
            raise DatasetError(f"hf:{spec} row {n}: {e}") from None
        problems.append(Problem(label, pid or str(n), question, gold, reference=reference_solution(dict(data), fields)))
    return problems


def load_dataset(spec: str, fields: Fields = Fields()) -> list[Problem]:
    """``demo``, a JSONL path, or ``hf:NAME[:CONFIG][:SPLIT]``."""
    if spec == DEMO:
        return load_demo()
    if spec.startswith("hf:"):
        return load_hf(spec[3:], fields)
    path = Path(spec).expanduser()
    if not path.exists():
        raise DatasetError(
            f"no dataset {spec!r}: not 'demo', not an existing JSONL file, not hf:NAME\n"
            "  fix: pass demo, a path to a .jsonl file, or hf:NAME[:CONFIG][:SPLIT] (online)"
        )
    return load_jsonl(path, fields=fields)


def select(
    problems: list[Problem], *, limit: int | None = None, offset: int = 0, ids: set[str] | None = None
) -> list[Problem]:
    out = [p for p in problems if ids is None or p.id in ids]
    out = out[offset:]
    return out[:limit] if limit is not None else out


def with_variant(problem: Problem, variant: str, question: str, **meta: Any) -> Problem:
    return replace(problem, variant=variant, question=question, meta={**problem.meta, **meta})


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def numbers_in(text: str) -> list[str]:
    """The numbers written in a text (commas removed), for checks that a rewrite kept them."""
    return [n.replace(",", "") for n in _NUMBER.findall(text)]
