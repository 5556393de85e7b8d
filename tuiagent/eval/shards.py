"""``eval --shard I/N``: a deterministic slice of an eval's problems, to run on several machines.

Shard I of N holds the problems whose place in the selected list (datasets in the order given,
after --offset, --limit and --id; counted from 0) is I-1 modulo N: a function of the problem
list alone, the same on every machine that lists the same problems, and balanced to one problem.
A problem's variants (cues, distractors) go with it. The shard's directory records which slice
it is of which list (``describe``), so ``eval --report-only DIR...`` can check the shards it
merges are one eval's, disjoint and complete (``eval.merge``).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from tuiagent.errors import UserError
from tuiagent.eval.datasets import Problem


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/4"`` -> (2, 4); a clear error for anything else."""
    found = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if found is None:
        raise UserError(f"--shard {text!r}: write it as I/N, e.g. 1/2 (the first of two shards)")
    index, count = int(found[1]), int(found[2])
    if count < 1 or not 1 <= index <= count:
        raise UserError(f"--shard {text!r}: I must be between 1 and N (N >= 1), e.g. 1/{max(count, 2)}")
    return index, count


def shard_name(shard: tuple[int, int] | None) -> str:
    return f"shard {shard[0]}/{shard[1]}" if shard else "the whole eval"


def shard_of(problems: list[Problem], shard: tuple[int, int]) -> list[Problem]:
    """The problems of shard ``shard`` = (I, N): every N-th, starting at the I-th."""
    index, count = shard
    return problems[index - 1 :: count]


def units(problems: list[Problem]) -> list[str]:
    """The problems as ``dataset/id``, the names a merge reports missing ones by."""
    return [f"{p.dataset}/{p.id}" for p in problems]


def selection_hash(problems: list[Problem]) -> str:
    """Which problem list was sharded: its ids and questions, in order."""
    listed = [[p.dataset, p.id, p.question_hash()] for p in problems]
    return hashlib.sha256(json.dumps(listed).encode()).hexdigest()[:16]


def describe(selected: list[Problem], shard: tuple[int, int]) -> dict[str, Any]:
    """What the eval's manifest records about its shard."""
    return {
        "index": shard[0],
        "count": shard[1],
        "selection": selection_hash(selected),
        "selected": len(selected),
        "problems": units(shard_of(selected, shard)),
    }
