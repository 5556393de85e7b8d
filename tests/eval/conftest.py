"""Fixtures for the eval tests: per-run scripted backends and a small GSM8K-shaped dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.eval.helpers import Factory


@pytest.fixture
def factory():
    return Factory


@pytest.fixture
def dataset(tmp_path: Path):
    """A small GSM8K-shaped file: question i asks for i + i."""

    def write(n: int = 4, name: str = "tiny.jsonl") -> Path:
        path = tmp_path / name
        lines = [
            json.dumps({"question": f"What is {i} plus {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"})
            for i in range(1, n + 1)
        ]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    return write


@pytest.fixture(autouse=True)
def isolated_cache_dir(tmp_path_factory, monkeypatch):
    """Distractor variants are cached in the user cache dir: keep the tests' own."""
    monkeypatch.setenv("TUIAGENT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
