"""The type check: mypy over the packages ``[tool.mypy]`` in pyproject.toml names (tuiagent, guards
and kernels: the whole code), with its settings. Under a minute cold, about 1 s with its cache
(.mypy_cache)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(
    importlib.util.find_spec("mypy") is None,
    reason="mypy is not installed (it comes with the test extra: pip install -e '.[test]')",
)
def test_mypy_passes():
    out = subprocess.run([sys.executable, "-m", "mypy"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, f"mypy exited {out.returncode}:\n{out.stdout}{out.stderr}"
