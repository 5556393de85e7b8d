"""An eval on two llama.cpp servers on loopback (``python -m llama_cpp.server``, SmolLM2-135M, one
thread each) named by one models.toml entry's ``base_urls``: runs spread over both, one server
killed mid-eval and the eval completes on the other. The runs are real: the Jupyter kernel, the
loop, the results file. (Shards and their merge: tests/eval/test_shards.py, on scripted runs.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.backends.llama_server import LlamaServer, ServerFailed, pool_entry
from tuiagent.core.events import Notice
from tuiagent.core.run_spec import RunSpec
from tuiagent.core.trajectory import load
from tuiagent.eval.harness import EvalConfig, run_eval
from tuiagent.eval.results import ResultStore
from tuiagent.presets import resolve_settings

pytestmark = pytest.mark.slow

# The eval a server is killed in: when the first run ends, the other server holds a run still (two
# runs of the same length may end together; four leave the other server its next one).
KILLED = 4
RUN = {"max_tool_calls": 1, "max_tokens": 60}  # short runs: this checks the plumbing, not SmolLM2


@pytest.fixture
def servers(smollm2_path: Path, tmp_path):
    started: list[LlamaServer] = []
    try:
        for i in range(2):
            started.append(LlamaServer(smollm2_path, tmp_path / f"server{i}.log").start())
        yield started
    except ServerFailed as e:
        pytest.fail(str(e))
    finally:
        for s in started:
            s.stop()


@pytest.fixture
def smollm2_path():
    from tests.backends.conftest import _resolve

    path, why = _resolve("smollm2-135m")
    if path is None:
        pytest.skip(f"SmolLM2-135M GGUF not found: {why}")
    return path


def _models(tmp_path: Path, servers: list[LlamaServer]) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(pool_entry("smol-pool", servers))
    return path


def _config(tmp_path: Path, models: Path) -> EvalConfig:
    return EvalConfig(
        datasets=["demo"],
        settings=resolve_settings(["none"]),
        out=tmp_path / "killed",
        model="smol-pool",
        models_file=models,
        limit=KILLED,
        concurrency=2,
        base=RunSpec(run=dict(RUN)),
    )


async def test_runs_spread_over_both_servers_and_a_server_killed_mid_eval_is_survived(tmp_path, servers):
    cfg = _config(tmp_path, _models(tmp_path, servers))
    killed: list[str] = []
    logged: list[str] = []

    def kill_the_other(record):
        if not killed:  # the first run to finish: the other server still has its run in flight
            other = next(s for s in servers if s.base_url != record["server"])
            other.kill()
            killed.append(other.base_url)

    outcome = await run_eval(cfg, log=logged.append, on_record=kill_the_other)
    records = ResultStore(cfg.out).records
    assert (outcome.ran, outcome.failed, len(records)) == (KILLED, 0, KILLED)
    retried = [r for r in records.values() if r["server_retries"]]
    # both servers ran runs: the first to end on one, and those in flight on the other when it was killed
    assert retried, f"no run was in flight on the killed server; log: {logged}"
    assert all(r["server"] != killed[0] for r in retried)
    assert all(r["determinism"] == "per-server" for r in records.values())
    _generated(records)
    notices = [e.message for e in load(Path(retried[0]["trajectory"])).events if isinstance(e, Notice)]
    assert any(m.startswith("started again from scratch on another server") and killed[0] in m for m in notices)
    assert any("starting it again from scratch on another server" in m for m in logged)


def _generated(records: dict) -> None:
    """Every run generated text and ended as a run does (not cut short by a server error)."""
    for key, r in records.items():
        assert r["reason"] != "error" and r["generated_tokens"] > 20 and not r["notices"], (
            key,
            r["reason"],
            r["notices"],
        )
