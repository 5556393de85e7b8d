"""An append-only JSONL file of records that a resumed job reads back: the eval's results, the
training collections' records, the eval's reused generations.

Each append is flushed and fsynced before it returns, so a kill loses at most the line being
written; that line, cut short, is skipped on reading (``skipped_lines``) and the next append
starts on a new line after it. A later record with the same key wins. Lines are split on "\\n"
only: ``json.dumps(ensure_ascii=False)`` leaves U+2028 and U+0085 unescaped inside strings, and
``str.splitlines`` would cut a record there. ``read_jsonl`` reads such a file, ``JsonlAppender``
appends to it, ``JsonlStore`` does both and keeps what it read and wrote.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import IO, Any, Self

from tuiagent.safe_read import DATA_BYTES, json_loads, read_bytes


def read_jsonl(path: Path, *, key: str | None = None) -> tuple[list[dict[str, Any]], int]:
    """(the records of the file in order, how many lines were skipped: cut short by a kill, not
    UTF-8, not a JSON object, or without the ``key`` field when one is given)."""
    if not path.exists() and not path.is_symlink():
        return [], 0
    records, skipped = [], 0
    for line in read_bytes(path, limit=DATA_BYTES, what="records file").split(b"\n"):
        if not line.strip():
            continue
        try:
            record = json_loads(line.decode("utf-8"))
        except ValueError:
            skipped += 1
            continue
        if not isinstance(record, dict) or (key is not None and key not in record):
            skipped += 1
            continue
        records.append(record)
    return records, skipped


class JsonlAppender:
    """Appends records to ``path``, each flushed and fsynced before ``append`` returns (safe from
    several threads); the file opens at the first append."""

    def __init__(self, path: Path | str, *, key: str | None = None):
        self.path = Path(path).expanduser()
        self.key = key
        self._file: IO[str] | None = None
        self._lock = threading.Lock()

    def append(self, record: dict[str, Any]) -> None:
        if self.key is not None and self.key not in record:
            raise ValueError(f"a record of {self.path} needs its {self.key!r} field")
        line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
        with self._lock:
            if self._file is not None and self._replaced():
                self._file.close()  # what was appended so far went with the old file; go on in the new one
                self._file = None
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
                if self._file.tell() > 0 and not self._ends_with_newline():
                    self._file.write("\n")  # after a line cut short by a kill
            self._file.write(line)
            self._file.flush()
            os.fsync(self._file.fileno())
            self._kept(record)

    def _replaced(self) -> bool:
        """Whether ``path`` is no longer the file this appender has open (moved, deleted, or replaced
        by another: a ``git stash`` or ``git checkout`` of a tracked results file mid-eval). Appending
        to the old one would write where nobody can read."""
        assert self._file is not None
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return True
        mine = os.fstat(self._file.fileno())
        return (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino)

    def _kept(self, record: dict[str, Any]) -> None:
        """Called with each record once it is written."""

    def _ends_with_newline(self) -> bool:
        with self.path.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class JsonlStore(JsonlAppender):
    """The file read back and appended to: ``records``, every record in order; ``latest``, by the
    ``key`` field, the last one written."""

    def __init__(self, path: Path | str, *, key: str | None = None):
        super().__init__(path, key=key)
        self.records, self.skipped_lines = read_jsonl(self.path, key=key)
        self.latest: dict[Any, dict[str, Any]] = {r[key]: r for r in self.records} if key is not None else {}

    def _kept(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        if self.key is not None:
            self.latest[record[self.key]] = record
