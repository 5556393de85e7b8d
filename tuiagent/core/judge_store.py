"""The judge's cache: ``<dir>/judgements.jsonl``, a ``JsonlStore`` keyed by judgement.

Keyed by (judge model, prompt id, prompt version, the inputs' hash), so the same question to the same
judge is asked once, and an interrupted judging pass continues where it stopped: a line cut short by
a kill is skipped on reading and that judgement is asked again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tuiagent.core.jsonl_store import JsonlStore

JUDGEMENTS = "judgements.jsonl"


def judgement_key(model: str, prompt_id: str, version: int, inputs: dict[str, str]) -> str:
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:20]
    return f"{model}/{prompt_id}/v{version}/{digest}"


class JudgementStore(JsonlStore):
    """Every judgement by its key (``latest``: a later line with the same key wins)."""

    def __init__(self, directory: Path | str):
        super().__init__(Path(directory).expanduser() / JUDGEMENTS, key="key")

    def get(self, key: str) -> dict[str, Any] | None:
        return self.latest.get(key)
