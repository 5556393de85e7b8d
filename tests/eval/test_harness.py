"""Running an eval: records, trajectories, resumption after an interrupt or a kill, concurrency, failures."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.eval.helpers import CalcKernel, Factory, answer_turn, code_turn, number_in
from tuiagent.core.run_spec import RunSpec
from tuiagent.core.trajectory import load
from tuiagent.errors import UserError
from tuiagent.eval.harness import EvalConfig, EvalRunner, load_problems, plan, run_eval
from tuiagent.eval.report import summary_from_store
from tuiagent.eval.results import ResultsError, ResultStore
from tuiagent.presets import resolve_settings

KERNELS = {"jupyter": lambda gold=None: CalcKernel()}


def solve_right(job):
    i = number_in(job.problem.question)
    return [code_turn(f"{i} + {i}"), answer_turn(str(2 * i))]


def config(tmp_path: Path, data: Path, *configs: str, **kw) -> EvalConfig:
    return EvalConfig(
        datasets=[str(data)], settings=resolve_settings(list(configs)), out=tmp_path / "out", model="scripted", **kw
    )


async def test_every_problem_under_every_setting_and_seed(tmp_path, dataset):
    cfg = config(tmp_path, dataset(3), "none", "attc", "cot", seeds=2)
    factory = Factory(
        lambda job: (
            solve_right(job)
            if job.setting.spec.mode == "tool"
            else [answer_turn(str(2 * number_in(job.problem.question)))]
        )
    )
    outcome = await run_eval(cfg, backend_factory=factory, kernels=KERNELS, log=lambda m: None)
    assert (outcome.total, outcome.ran, outcome.already_done, outcome.failed) == (18, 18, 0, 0)
    store = ResultStore(cfg.out)
    keys = sorted(store.records)
    assert len(keys) == 18 and keys[0] == "tiny/1/attc/0" and "tiny/3/cot/1" in keys
    record = store.records["tiny/2/attc/1"]
    assert (record["correct"], record["tcn"], record["attc_trust"], record["model"]) == (True, 1, 1, "scripted")
    assert store.records["tiny/2/cot/0"]["tcn"] == 0
    events = load(Path(record["trajectory"])).events  # the trajectory the TUI replays
    assert events[0].type == "RunStarted" and events[-1].type == "RunFinished" and events[0].gold == "4"
    manifest = store.manifest()
    assert [s["name"] for s in manifest["settings"]] == ["none", "attc", "cot"] and manifest["model"] == "scripted"
    summary = summary_from_store(cfg.out)
    assert summary["datasets"]["tiny"]["settings"]["attc"]["accuracy"] == 1.0


async def test_a_moved_eval_directory_keeps_its_trajectories(tmp_path, dataset):
    cfg = config(tmp_path, dataset(2), "none")
    await run_eval(cfg, backend_factory=Factory(solve_right), kernels=KERNELS, log=lambda m: None)
    written = [json.loads(line) for line in (cfg.out / "results.jsonl").read_text().splitlines()]
    assert {r["trajectory"] for r in written} == {"runs/tiny/none/1-s0.jsonl", "runs/tiny/none/2-s0.jsonl"}
    moved = cfg.out.rename(tmp_path / "moved")
    records = ResultStore(moved).records.values()
    assert all(Path(r["trajectory"]).is_file() and Path(r["trajectory"]).is_relative_to(moved) for r in records)
    assert summary_from_store(moved)["datasets"]["tiny"]["settings"]["none"]["accuracy"] == 1.0
    # results written before paths were relative name the old directory: found again under runs/
    old = tmp_path / "older"
    lines = [{**r, "trajectory": str(old / r["trajectory"])} for r in written]
    (moved / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert all(Path(r["trajectory"]).is_file() for r in ResultStore(moved).records.values())


async def test_interrupted_eval_resumes_without_rerunning(tmp_path, dataset):
    cfg = config(tmp_path, dataset(4), "none", "attc")
    release = asyncio.Event()

    def turns(job):
        return solve_right(job)

    class Hanging(Factory):
        def __call__(self, job):
            backend = super().__call__(job)
            if job.key == "tiny/3/none/0":  # the fifth run never finishes: we interrupt it
                original = backend.generate

                async def stuck(*a, **k):
                    await release.wait()
                    async for t in original(*a, **k):
                        yield t

                backend.generate = stuck
            return backend

    first = Hanging(turns)
    task = asyncio.create_task(run_eval(cfg, backend_factory=first, kernels=KERNELS, log=lambda m: None))
    for _ in range(500):
        await asyncio.sleep(0.01)
        if "tiny/3/none/0" in first.keys:
            break
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    saved = ResultStore(cfg.out).records
    assert sorted(saved) == ["tiny/1/attc/0", "tiny/1/none/0", "tiny/2/attc/0", "tiny/2/none/0"]
    partial = load(cfg.out / "runs/tiny/none/3-s0.jsonl").events  # its trajectory says it was cancelled
    assert partial[-1].type == "RunFinished" and partial[-1].reason == "cancelled"
    assert ResultStore(cfg.out).manifest()["sessions"][-1]["interrupted"] is True

    second = Factory(turns)
    outcome = await run_eval(cfg, backend_factory=second, kernels=KERNELS, log=lambda m: None)
    assert sorted(second.keys) == ["tiny/3/attc/0", "tiny/3/none/0", "tiny/4/attc/0", "tiny/4/none/0"]
    assert (outcome.ran, outcome.already_done) == (4, 4)
    lines = (cfg.out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 8 and len({json.loads(x)["key"] for x in lines}) == 8  # nothing twice, nothing lost
    assert load(cfg.out / "runs/tiny/none/3-s0.jsonl").events[-1].reason == "answer"  # the partial file was replaced
    third = Factory(turns)
    outcome = await run_eval(cfg, backend_factory=third, kernels=KERNELS, log=lambda m: None)
    assert third.keys == [] and outcome.already_done == 8


DRIVER = """
import asyncio, sys
sys.path.insert(0, {root!r})
from tests.eval.helpers import CalcKernel, Factory, answer_turn, code_turn, number_in
from tuiagent.presets import resolve_settings
from tuiagent.eval.harness import EvalConfig, run_eval
from pathlib import Path

def turns(job):
    i = number_in(job.problem.question)
    return [code_turn(f"{{i}} + {{i}}"), answer_turn(str(2 * i))]

cfg = EvalConfig(datasets=[{data!r}], settings=resolve_settings(["none"]), out=Path({out!r}), model="scripted")
factory = Factory(turns, delay_s={delay})
asyncio.run(run_eval(cfg, backend_factory=factory, kernels={{"jupyter": lambda gold=None: CalcKernel()}},
                     on_record=lambda r: print("done", r["key"], flush=True), log=lambda m: None))
print("keys", ",".join(factory.keys), flush=True)
"""


def test_killed_eval_keeps_finished_runs_and_reruns_only_the_rest(tmp_path, dataset):
    data, out = dataset(6), tmp_path / "out"
    root = str(Path(__file__).resolve().parents[2])
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(DRIVER.format(root=root, data=str(data), out=str(out), delay=0.05)))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=root)
    done = []
    deadline = time.monotonic() + 60
    while len(done) < 2 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("done"):
            done.append(line.split()[1])
    os.kill(proc.pid, signal.SIGKILL)  # a crash: no clean-up runs
    proc.wait()
    assert len(done) == 2
    saved = set(ResultStore(out).records)
    assert set(done) <= saved and len(saved) < 6
    script.write_text(textwrap.dedent(DRIVER.format(root=root, data=str(data), out=str(out), delay=0.0)))
    rerun = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=root, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    ran = rerun.stdout.strip().splitlines()[-1].removeprefix("keys ").split(",")
    assert set(ran).isdisjoint(saved) and set(ran) | saved == {f"tiny/{i}/none/0" for i in range(1, 7)}


async def test_concurrency_bounds_runs_in_flight(tmp_path, dataset):
    cfg = config(tmp_path, dataset(8), "none", concurrency=3)
    active, peak = 0, 0

    class Counting(Factory):
        def __call__(self, job):
            backend = super().__call__(job)
            original = backend.generate

            async def generate(*a, **k):
                nonlocal active, peak
                active += 1
                peak = max(peak, active)
                try:
                    async for t in original(*a, **k):
                        yield t
                finally:
                    active -= 1

            backend.generate = generate
            return backend

    outcome = await run_eval(
        cfg, backend_factory=Counting(solve_right, delay_s=0.002), kernels=KERNELS, log=lambda m: None
    )
    assert outcome.ran == 8 and peak == 3


async def test_llama_cpp_concurrency_loads_the_batched_engine_with_a_message(tmp_path, dataset, monkeypatch):
    from dataclasses import replace

    import tuiagent.backends
    from tuiagent.runner import resolve_spec

    spec = replace(resolve_spec("scripted"), backend="llama_cpp")
    opened = []
    monkeypatch.setattr(tuiagent.backends, "open_backend", lambda spec, **options: opened.append(options))
    messages = []
    with ResultStore(tmp_path / "o") as store:
        runner = EvalRunner(spec, store, config(tmp_path, dataset(1), "none", concurrency=8), log=messages.append)
        runner._open_shared()
    assert runner.concurrency == 8 and "8 run(s) in flight on llama.cpp's batched engine" in messages[0]
    assert opened == [{"n_seq": 8}]  # the worker loads the model with 8 sequences


async def test_a_stored_run_of_another_question_text_runs_again(tmp_path, dataset):
    """A resumed eval keys runs by problem id, variant, setting and seed; a run stored for another text
    of that question (a distractor variant written again, an edited dataset) is not reused."""
    data = dataset(3)
    cfg = config(tmp_path, data, "none")
    await run_eval(cfg, backend_factory=Factory(solve_right), kernels=KERNELS, log=lambda m: None)
    lines = data.read_text().splitlines()
    lines[1] = json.dumps({"question": "What is 7 plus 7?", "answer": "7 + 7 = 14\n#### 14"})  # problem 2, edited
    data.write_text("\n".join(lines) + "\n")
    again, said = Factory(solve_right), []
    outcome = await run_eval(cfg, backend_factory=again, kernels=KERNELS, log=said.append)
    assert again.keys == ["tiny/2/none/0"] and (outcome.ran, outcome.already_done) == (1, 2)
    assert any("1 run(s)" in m and "another question text" in m for m in said)
    record = ResultStore(cfg.out).records["tiny/2/none/0"]
    assert (record["question"], record["answer"], record["correct"]) == ("What is 7 plus 7?", "14", True)
    quiet = Factory(solve_right)  # a third time: nothing is stale any more
    assert (await run_eval(cfg, backend_factory=quiet, kernels=KERNELS, log=lambda m: None)).ran == 0


async def test_resuming_runs_made_by_another_engine_is_called_out(tmp_path, dataset, monkeypatch):
    from dataclasses import replace

    import tuiagent.backends
    from tuiagent.runner import resolve_spec

    class Engine:
        engine = "batched:new"

    spec = replace(resolve_spec("scripted"), backend="llama_cpp")
    monkeypatch.setattr(tuiagent.backends, "open_backend", lambda spec, **options: Engine())
    cfg = config(tmp_path, dataset(2), "none")
    jobs = plan(load_problems(cfg), cfg.settings, 1)
    messages: list[str] = []
    with ResultStore(tmp_path / "o") as store:
        runner = EvalRunner(spec, store, cfg, log=messages.append)
        runner._open_shared()
        store.append({"key": jobs[0].key, "engine": "batched:new"})
        runner._warn_other_engines(jobs)
        assert not any("warning" in m for m in messages) and runner.memo is not None
        store.append({"key": jobs[1].key, "engine": "batched:old"})
        runner._warn_other_engines(jobs)
    assert "1 run(s) already in" in messages[-1] and "(batched:old; now batched:new)" in messages[-1]


async def test_pooled_kernels_one_per_run(tmp_path, dataset):
    made = []

    def kernel(gold=None):
        made.append(CalcKernel())
        return made[-1]

    cfg = config(tmp_path, dataset(3), "none", concurrency=2)
    outcome = await run_eval(
        cfg, backend_factory=Factory(solve_right), kernels={"jupyter": kernel}, log=lambda m: None
    )  # jupyter is pooled by default
    assert outcome.ran == 3
    used = [k for k in made if k.calls]
    assert len(used) == 3 and all(len(k.calls) == 1 for k in used)  # never shared between runs


async def test_failed_runs_are_not_recorded_and_are_retried(tmp_path, dataset):
    cfg = config(tmp_path, dataset(2), "none")
    messages = []
    outcome = await run_eval(
        cfg,
        backend_factory=Factory(solve_right),
        pooled=(),
        kernels={"jupyter": lambda gold=None: CalcKernel(fail=True)},
        log=messages.append,
    )
    assert (outcome.ran, outcome.failed) == (0, 2) and "will be retried" in messages[-1]
    assert ResultStore(cfg.out).records == {}
    outcome = await run_eval(cfg, backend_factory=Factory(solve_right), kernels=KERNELS, log=lambda m: None)
    assert outcome.ran == 2
    cfg = config(tmp_path, dataset(6), "none")
    cfg.out = tmp_path / "other"
    with pytest.raises(UserError, match="5 runs in a row failed"):
        await run_eval(
            cfg,
            backend_factory=Factory(solve_right),
            pooled=(),
            kernels={"jupyter": lambda gold=None: CalcKernel(fail=True)},
            log=lambda m: None,
        )


async def test_results_of_another_model_or_a_changed_setting_are_refused(tmp_path, dataset):
    data = dataset(1)
    await run_eval(
        config(tmp_path, data, "attc:attc.threshold=0.9"),
        backend_factory=Factory(solve_right),
        kernels=KERNELS,
        log=lambda m: None,
    )
    changed = config(tmp_path, data, "attc:attc.threshold=0.9", base=RunSpec(run={"max_tool_calls": 2}))
    with pytest.raises(ResultsError, match="defined differently"):
        await run_eval(changed, backend_factory=Factory(solve_right), kernels=KERNELS, log=lambda m: None)
    store = ResultStore(tmp_path / "out")
    with pytest.raises(ResultsError, match="holds runs of model scripted"):
        store.check_compatible("qwen2.5-coder-1.5b", {})


async def test_retry_errors_replaces_error_runs(tmp_path, dataset):
    cfg = config(tmp_path, dataset(1), "none")

    class Broken(Factory):
        def __call__(self, job):
            backend = super().__call__(job)

            async def generate(*a, **k):
                raise ConnectionError("server went away")
                yield  # pragma: no cover

            backend.generate = generate
            return backend

    await run_eval(cfg, backend_factory=Broken(solve_right), kernels=KERNELS, log=lambda m: None)
    assert ResultStore(cfg.out).records["tiny/1/none/0"]["reason"] == "error"
    again = Factory(solve_right)
    await run_eval(cfg, backend_factory=again, kernels=KERNELS, log=lambda m: None)
    assert again.keys == []  # an error run is a result unless asked
    cfg.retry_errors = True
    await run_eval(cfg, backend_factory=again, kernels=KERNELS, log=lambda m: None)
    assert again.keys == ["tiny/1/none/0"] and ResultStore(cfg.out).records["tiny/1/none/0"]["correct"] is True


def test_a_line_cut_short_by_a_kill_is_skipped_and_appending_goes_on(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({"key": "a", "model": "m"}) + "\n" + '{"key": "b", "mod')
    store = ResultStore(tmp_path)
    assert list(store.records) == ["a"] and store.skipped_lines == 1
    store.append({"key": "c", "model": "m"})
    store.close()
    assert sorted(ResultStore(tmp_path).records) == ["a", "c"]


class AnswerBackend:
    """Test double for a shared model: answers every prompt with \\boxed{2}; ``crash`` makes its
    streams raise BackendCrashed, as a llama_cpp backend whose worker process died does."""

    def __init__(self, crash: bool = False):
        from tuiagent.backends.base import GenerationStats

        self.model_id, self.stats, self.crash = "scripted", GenerationStats(), crash
        self.closed = False

    def stream(self, prompt, sampling, stop):
        from tuiagent.protocol import TokenStream

        return TokenStream(self._generate)

    async def _generate(self, out):
        from tuiagent.backends.base import BackendCrashed
        from tuiagent.protocol import Token

        yield Token("The answer is ", -0.1)
        if self.crash:
            raise BackendCrashed("the model process for 'scripted' died with SIGSEGV while generating\n  fix: ...")
        yield Token("\\boxed{2}.", -0.1)
        out.stop_reason = "eos"

    def count_tokens(self, text):
        return len(text.split())

    def render_chat(self, messages):
        return "\n".join(m["content"] for m in messages)

    async def aclose(self):
        self.closed = True


async def test_a_shared_model_that_crashes_is_reloaded_and_its_run_retried_later(tmp_path, dataset, monkeypatch):
    from dataclasses import replace

    import tuiagent.runner
    from tuiagent.runner import resolve_spec

    opened = [AnswerBackend(crash=True), AnswerBackend()]
    made = iter(opened)
    monkeypatch.setattr(tuiagent.runner, "open_model", lambda spec, request: next(made))
    spec = replace(resolve_spec("scripted"), backend="openai")  # shared, not per run
    messages = []
    with ResultStore(tmp_path / "out") as store:
        cfg = config(tmp_path, dataset(3), "none")
        async with EvalRunner(spec, store, cfg, kernels=KERNELS, log=messages.append) as runner:
            outcome = await runner.run(plan(load_problems(cfg), cfg.settings, 1))
        assert (outcome.ran, outcome.failed) == (2, 1)
        assert opened[0].closed and runner.shared_backend is None  # the dead one closed, the new one at exit
        assert any("loading the model again" in m for m in messages)
        assert any("SIGSEGV" in m and "will be retried" in m for m in messages)
        assert len(store.records) == 2 and all(r["answer"] == "2" for r in store.records.values())
