"""The suite's shared fixtures and hooks, for tests/ and each paper's tests (guards/<paper>/tests).
Test doubles here are named as such: they stand in for a kernel, never replace the real one."""

from __future__ import annotations

import json
import os
import resource
import signal
import time
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
    source = Path(__file__).parent / "tests" / "ui" / "data" / "guarded.jsonl"
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


def pytest_configure(config):
    """Under pytest-xdist (`make test` runs two workers per CPU) each llama.cpp model a test
    loads decodes on one thread (``llama_model.default_threads`` reads OMP_NUM_THREADS), so the model
    tests spread over the workers like the rest: one thread per model does not wait at barriers for
    threads the other workers hold up, and two models on one thread each got through the same tokens
    on 2 cores in 0.7 of the time of one model on two threads after the other (docs/benchmarks.md,
    "The test suite"). An explicit OMP_NUM_THREADS wins."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    # A shell without job control starts a background command (`make test &`, nohup) with SIGINT
    # ignored, and every process it starts inherits that: the tests that press ctrl-c on a tuiagent
    # process would then see it carry on. The suite's processes take ctrl-c as a terminal gives it.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser):
    parser.addoption(
        "--cpu-log",
        metavar="DIR",
        help="write each test's wall time and CPU time (its process's, and its reaped children's) to "
        "DIR/<worker>.jsonl; `python bench/suite_cpu.py DIR` sums them by file (docs/benchmarks.md)",
    )


def _cpu_s() -> tuple[float, float, float]:
    """(this process's CPU-s, its reaped children's, the whole machine's busy CPU-s since boot)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    machine = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime, machine


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With --cpu-log: where the suite's CPU goes, test by test. A child reaped late (a kernel, a model
    worker) counts for the test that reaped it, and one never reaped by this process (a kernel inside
    bubblewrap) for none: the split is a guide. ``machine`` is the whole machine's busy CPU time over
    the test (/proc/stat): exact for a test run alone (``-p no:xdist``), shared among parallel ones."""
    directory = item.config.getoption("--cpu-log")
    if not directory:
        yield
        return
    start, (own, kids, machine) = time.monotonic(), _cpu_s()
    yield
    own_after, kids_after, machine_after = _cpu_s()
    row = {
        "id": item.nodeid,
        "wall": time.monotonic() - start,
        "own": own_after - own,
        "children": kids_after - kids,
        "machine": machine_after - machine,
    }
    path = Path(directory) / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def pytest_collection_modifyitems(config, items):
    """The tests that load a real model (marked slow) first, each in its place otherwise: under
    pytest-xdist (`--dist load --maxschedchunk 1`, one test at a time to whichever worker is free)
    the longest start first and the short ones fill in around them, so no worker is left with a long
    test at the end while the others wait."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
