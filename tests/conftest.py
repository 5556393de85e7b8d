"""Shared fixtures. Test doubles here are named as such: they stand in for a kernel, never replace the real one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernels.base import CellResult, Output


class CannedKernel:
    """Test double for a kernel: answers each call from a list of canned results, in order."""

    def __init__(self, results: list[CellResult] | None = None):
        self.results = list(results or [])
        self.calls: list[str] = []

    async def start(self) -> None: ...

    async def execute(self, code: str, timeout: float) -> CellResult:
        self.calls.append(code)
        if self.results:
            return self.results.pop(0)
        return CellResult(outputs=(Output("stdout", "ok\n"),))

    async def interrupt(self) -> None: ...

    async def restart(self) -> None: ...

    async def shutdown(self) -> None: ...

    async def __aenter__(self) -> "CannedKernel":
        return self

    async def __aexit__(self, *exc: object) -> None: ...


@pytest.fixture
def canned_kernel():
    return CannedKernel


@pytest.fixture
def write_script(tmp_path: Path):
    """Write scripted-backend turns (strings or dicts) to a JSON-lines file and return its path."""

    def write(*turns, name: str = "script.jsonl") -> Path:
        path = tmp_path / name
        lines = [json.dumps(t if isinstance(t, dict) else {"text": t, "logprob": -0.01}) for t in turns]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    return write


@pytest.fixture(autouse=True)
def isolated_user_dirs(tmp_path_factory, monkeypatch):
    """Keep tests away from the real user config, data and cache dirs (the model cache is shared, read-mostly)."""
    base = tmp_path_factory.mktemp("user")
    monkeypatch.setenv("TUIAGENT_CONFIG_DIR", str(base / "config"))
    monkeypatch.setenv("TUIAGENT_DATA_DIR", str(base / "data"))


@pytest.fixture
def unsure_trajectory(tmp_path: Path) -> Path:
    """tests/ui/data/guarded.jsonl with one token in five made unsure (p 0.22): token shading has
    something to draw."""
    source = Path(__file__).parent / "ui" / "data" / "guarded.jsonl"
    lines, n = [], 0
    for line in source.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("type") == "TokenDelta":
            n += 1
            if n % 5 == 0:
                record["logprob"] = -1.5
        lines.append(json.dumps(record))
    path = tmp_path / "unsure" / "guarded.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test` runs `-n 2 --dist loadgroup`) the tests that load a real model
    (marked slow) go to one worker, one after another: two of them at once would share two cores
    between four llama.cpp threads, each waiting at the other's barriers."""
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.xdist_group("model"))
