"""Fixtures of G-STEP's and the tool-use tax's tests: hand-made G-STEP gate files, and the eval's
(tests/eval/conftest.py) for the protocol's; the repository's conftest.py gives the rest."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from guards.gstep.features import N_FEATURES
from tests.eval.conftest import dataset, factory, isolated_cache_dir  # noqa: F401


@pytest.fixture
def constant_gate(tmp_path: Path):
    """A gate file whose P(continue) is ``p`` for every input (zero weights, output bias logit(p)).
    ``budget``: the tool budget it says it was trained at (none: a v1 file); ``train_sd``: the
    training sds it carries (none: a file that cannot tell what lies outside its range)."""

    def make(p: float, *, name: str = "gate.npz", budget: int | None = None, train_sd: np.ndarray | None = None) -> str:
        meta: dict[str, object] = {"n_layers": 2}
        if budget is not None:
            meta["max_tool_calls"] = budget
        extra = {} if train_sd is None else {"train_sd": train_sd}
        path = tmp_path / name
        np.savez(
            path,
            meta=np.array(json.dumps(meta)),
            mean=np.zeros(N_FEATURES),
            scale=np.ones(N_FEATURES),
            W0=np.zeros((N_FEATURES, 3)),
            b0=np.zeros(3),
            W1=np.zeros((3, 1)),
            b1=np.array([math.log(p / (1 - p))]),
            **extra,
        )
        return str(path)

    return make
