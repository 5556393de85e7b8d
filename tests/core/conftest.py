"""Fixtures of the core tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernels.jupyter import JupyterKernel


@pytest.fixture
async def kernel(tmp_path: Path):
    """A real Jupyter kernel of the test's own, shut down after it."""
    async with JupyterKernel(images_dir=tmp_path / "images") as k:
        yield k
