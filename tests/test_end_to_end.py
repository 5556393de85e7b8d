"""The real path end to end: the embedded default model writes Python, a real Jupyter kernel runs it,
every guard watches (one run: the model on 2 cores is the cost)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tuiagent.config.loader import load_models
from tuiagent.config.sources import install_state

pytestmark = pytest.mark.slow

WORD_PROBLEM = (
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?"
)


@pytest.fixture(scope="module")
def default_model_ready():
    spec = load_models().get()
    state = install_state(spec)
    if state not in ("ready", "assembled-on-first-use"):
        pytest.skip(f"default model not installed ({state}); `make test` installs it")
    return spec


def test_default_model_with_every_guard_on(default_model_ready, tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuiagent",
            "solve",
            WORD_PROBLEM,
            "--gold",
            "10",
            "--guard",
            "all",
            "--json",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    events = [json.loads(line) for line in out.stdout.splitlines()]
    started = events[0]
    assert started["model_id"] == default_model_ready.id and started["backend"] == "LlamaCppBackend"
    code = [e for e in events if e["type"] == "CodeBlock"]
    results = [e for e in events if e["type"] == "ToolResult" and e["executed"]]
    assert code and results, "the model answered without running code"
    assert any(r["outputs"] and not r["error"] for r in results)
    logprobs = [e["logprob"] for e in events if e["type"] == "TokenDelta" and e["logprob"] is not None]
    assert logprobs and all(lp <= 0 for lp in logprobs)
    on = {e["guard"] for e in events if e["type"] == "GuardToggled" and e["enabled"]}
    assert on == {"attc", "gstep", "necessity", "prunetir", "tim"}, [e for e in events if e["type"] == "GuardToggled"]
    verdicts = [e for e in events if e["type"] == "GuardVerdict"]
    by_guard = {v["guard"] for v in verdicts}
    assert {"attc", "necessity", "tim"} <= by_guard  # a code block ran: confidence, necessity; TIM at the end
    attc = next(v for v in verdicts if v["guard"] == "attc")
    calibrated = default_model_ready.guards["attc"]["threshold"]  # from the shipped calibration file
    assert 0 < attc["data"]["confidence"] <= 1 and attc["data"]["threshold"] == calibrated
    finished = events[-1]
    assert finished["type"] == "RunFinished" and finished["reason"] in ("answer", "tool_budget", "token_budget")
    assert finished["tool_calls"] >= 1
    assert finished["correct"] is True or finished["reason"] != "answer", finished["answer"]
