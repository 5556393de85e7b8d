"""The judge's cache: one JSON line per judgement, appended (flushed and synced) as each ends.

Keyed by (judge model, prompt id, prompt version, the inputs' hash), so the same question to the same
judge is asked once, and an interrupted judging pass continues where it stopped. A line cut short by
a kill is skipped on reading (``skipped_lines``) and that judgement is asked again.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import IO, Any

JUDGEMENTS = "judgements.jsonl"


def judgement_key(model: str, prompt_id: str, version: int, inputs: dict[str, str]) -> str:
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:20]
    return f"{model}/{prompt_id}/v{version}/{digest}"


class JudgementStore:
    """``<dir>/judgements.jsonl``: every judgement by its key (a later line with the same key wins)."""

    def __init__(self, directory: Path | str):
        self.path = Path(directory).expanduser() / JUDGEMENTS
        self.records: dict[str, dict[str, Any]] = {}
        self.skipped_lines = 0
        self._file: IO[str] | None = None
        self._lock = threading.Lock()
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                    self.records[record["key"]] = record
                except (json.JSONDecodeError, KeyError, TypeError):
                    self.skipped_lines += bool(line.strip())

    def get(self, key: str) -> dict[str, Any] | None:
        return self.records.get(key)

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False) + "\n"
        with self._lock:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                cut = self.path.exists() and self.path.stat().st_size > 0 and not self._ends_with_newline()
                self._file = self.path.open("a", encoding="utf-8")
                if cut:
                    self._file.write("\n")  # after a line cut short by a kill
            self._file.write(line)
            self._file.flush()
            os.fsync(self._file.fileno())
            self.records[record["key"]] = record

    def _ends_with_newline(self) -> bool:
        with self.path.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
