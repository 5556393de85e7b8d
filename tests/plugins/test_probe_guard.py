"""The proof that a paper is a plug-in: ``probe`` (examples/probe) lives outside tuiagent/ and
guards/, is registered only through the ``tuiagent.guards`` and ``tuiagent.protocols`` entry points
of its dist-info, and shows up everywhere a shipped guard and protocol do: ``tuiagent guards`` and
``tuiagent protocols``, live runs, the app's guard panel and code blocks, replay, compare, the
eval's ``--protocol``, records and summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.eval.helpers import CalcKernel, Factory, answer_turn, code_turn
from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.core import events as ev
from tuiagent.core.run_spec import RunSpec

PROBE_DIR = Path(__file__).resolve().parents[2] / "examples" / "probe"
LONG = "x" * 45  # longer than the probe's default max_chars (40)


@pytest.fixture
def probe(monkeypatch):
    """The probe installed the way a package is: a dist-info with an entry point on the path."""
    from guards.chain import available, presenter
    from tuiagent.eval.protocols import installed

    monkeypatch.syspath_prepend(str(PROBE_DIR))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(PROBE_DIR), os.environ.get("PYTHONPATH")])))
    presenter.cache_clear()
    assert "probe" in available() and "probe" in [p.name for p in installed()]
    yield
    presenter.cache_clear()


def turns() -> list[str]:
    return [code_turn(f"'{LONG}'"), code_turn("1 + 1"), answer_turn("2")]


async def run_with_probe(tmp_path: Path) -> list[ev.Event]:
    from guards.chain import GuardChain
    from tuiagent.core.loop import Agent
    from tuiagent.core.trajectory import Recorder

    backend = ScriptedBackend([split_tokens(t, -0.05) for t in turns()])
    with Recorder(tmp_path / "run.jsonl") as recorder:
        agent = Agent(backend, CalcKernel(), guards=GuardChain({"probe": {}}, {"probe"}), recorder=recorder)
        return [e async for e in agent.stream("What is 1 + 1?", gold="2")]


async def test_the_budget_it_declares_raises_the_default(probe, tmp_path):
    started = (await run_with_probe(tmp_path))[0]
    assert started.settings["max_tool_calls"] == 6 and started.settings["raised"] == [["max_tool_calls", "probe"]]


def test_tuiagent_guards_lists_it(probe):
    out = subprocess.run(
        [sys.executable, "-m", "tuiagent", "guards"], capture_output=True, text=True, check=True
    ).stdout
    assert "probe  Probe: flags long tool outputs" in out and "probe.max_chars = 40" in out


async def test_a_live_run_records_it_and_replay_and_compare_read_it(probe, tmp_path):
    from tuiagent.core.compare import step_cells
    from tuiagent.core.trajectory import load
    from tuiagent.ui.describe import describe_event, is_guard_decision

    events = await run_with_probe(tmp_path)
    verdicts = [e for e in events if isinstance(e, ev.GuardVerdict)]
    assert [(v.guard, v.action, v.data["chars"]) for v in verdicts] == [("probe", "flag", 45), ("probe", "pass", 1)]
    replayed = [e for e in load(tmp_path / "run.jsonl").events if isinstance(e, ev.GuardVerdict)]
    assert replayed == verdicts
    notes = [n.text for cell in step_cells(events) for n in cell.verdicts]
    assert notes == ["probe 45 chars", "probe 1 chars"]
    assert describe_event(verdicts[0]) == "probe · flag · probe 45 chars" and is_guard_decision(verdicts[0])


async def test_the_eval_counts_it_and_its_summary_column(probe, tmp_path):
    from tuiagent.eval.harness import EvalConfig, run_eval
    from tuiagent.eval.report import summary_from_store, to_markdown
    from tuiagent.eval.results import ResultStore
    from tuiagent.presets import resolve_settings

    data = tmp_path / "tiny.jsonl"
    data.write_text(
        "".join(json.dumps({"question": f"What is {i} plus {i}?", "answer": f"#### {2 * i}"}) + "\n" for i in (1, 2)),
        encoding="utf-8",
    )
    cfg = EvalConfig(
        datasets=[str(data)], settings=resolve_settings(["none", "probe"]), out=tmp_path / "out", model="scripted"
    )
    outcome = await run_eval(
        cfg,
        backend_factory=Factory(lambda job: turns()),
        log=lambda m: None,
        kernels={"jupyter": lambda gold=None: CalcKernel()},
    )
    assert outcome.ran == 4
    records = ResultStore(cfg.out).records
    assert {k: r["probe_long"] for k, r in records.items()} == {
        "tiny/1/none/0": 0,
        "tiny/2/none/0": 0,
        "tiny/1/probe/0": 1,
        "tiny/2/probe/0": 1,
    }
    summary = summary_from_store(cfg.out)
    assert summary["datasets"]["tiny"]["settings"]["probe"]["probe_long"] == 2
    assert "probe long" in to_markdown(summary)


def test_its_condition_is_a_word_of_the_setting_grammar(probe):
    """Registered under tuiagent.conditions beside the shipped ones, it reads in -c and as a preset's condition."""
    from tuiagent.presets import conditions, grammar

    found = conditions()
    assert found["terse"] == {"output_chars": 20} and found["full"] == {}  # the tool-use tax's seven stay
    spec = grammar().parse("terse")
    assert (spec.condition, spec.run, spec.guards) == ("terse", {"output_chars": 20}, ())
    assert grammar().parse("probe+terse").run == {"output_chars": 20}


def test_tuiagent_protocols_lists_its_protocol(probe):
    out = subprocess.run(
        [sys.executable, "-m", "tuiagent", "protocols"], capture_output=True, text=True, check=True
    ).stdout
    assert "probe  Probe (an example plug-in)" in out
    assert "--protocol probe-sweep: -c none -c probe -c probe:probe.max_chars=10" in out
    assert "--protocol probe-suffix: ask every problem again with a sentence after it" in out
    assert "probe-suffix:text=...  the sentence" in out


def test_its_switch_runs_its_variants_from_the_command_line(probe, write_script, tmp_path):
    """A plug-in's own ``--protocol`` switch, with a key, reaches its variants and its manifest entry
    through the registry alone; a key it does not take is refused with the keys it does."""
    data = tmp_path / "tiny.jsonl"
    data.write_text(json.dumps({"question": "What is 1 plus 1?", "answer": "#### 2"}) + "\n", encoding="utf-8")
    script = write_script(answer_turn("2"))
    args = [
        sys.executable,
        "-m",
        "tuiagent",
        "eval",
        str(data),
        "-m",
        "scripted",
        "--script",
        str(script),
        "-c",
        "none",
    ]
    out = tmp_path / "out"
    done = subprocess.run(
        [*args, "--protocol", "probe-suffix:text=Say why.", "-o", str(out), "-q", "-f", "md"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    from tuiagent.eval.results import ResultStore

    store = ResultStore(out)
    assert sorted(r["variant"] for r in store.records.values()) == ["", "probe:suffix"]
    manifest = store.manifest() or {}
    assert manifest["probe_suffix"] == "Say why." and manifest["protocols"] == ["probe-suffix"]
    bad = subprocess.run(
        [*args, "--protocol", "probe-suffix:colour=red", "-o", str(tmp_path / "x")], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--protocol probe-suffix has no key colour" in bad.stderr
    assert "its keys: text" in bad.stderr and not (tmp_path / "x").exists()


async def test_its_protocol_adds_its_settings_and_its_table_to_the_report(probe, tmp_path):
    from tuiagent.eval.harness import EvalConfig, run_eval
    from tuiagent.eval.protocols import settings_of
    from tuiagent.eval.report import summary_from_store, to_markdown
    from tuiagent.presets import resolve_settings

    data = tmp_path / "tiny.jsonl"
    data.write_text(json.dumps({"question": "What is 1 plus 1?", "answer": "#### 2"}) + "\n", encoding="utf-8")
    settings = resolve_settings([], added=settings_of("probe-sweep"))
    cfg = EvalConfig(datasets=[str(data)], settings=settings, out=tmp_path / "out", model="scripted")
    outcome = await run_eval(
        cfg,
        backend_factory=Factory(lambda job: [code_turn("'x' * 20"), answer_turn("2")]),
        log=lambda m: None,
        kernels={"jupyter": lambda gold=None: CalcKernel()},
    )
    assert outcome.ran == 3
    summary = summary_from_store(cfg.out)
    # a 20-character output: long for the 10-character limit only; the setting without the guard has no row
    assert summary["datasets"]["tiny"]["probe"] == {
        "probe": {"runs": 1, "flagged": 0},
        "probe:probe.max_chars=10": {"runs": 1, "flagged": 1},
    }
    markdown = to_markdown(summary)
    assert "### tiny: probe, runs with a flagged tool output" in markdown
    assert "| probe:probe.max_chars=10 | 1 | 1 | 1.000 |" in markdown


async def test_the_app_shows_it_in_the_panel_on_the_code_block_and_in_replay(probe, tmp_path):
    from tuiagent import paths
    from tuiagent.ui import AppConfig, make_app
    from tuiagent.ui.screens.replay import ReplayScreen
    from tuiagent.ui.widgets.code_block import CodeBlockView

    def text_of(widget) -> str:
        return widget.render().plain

    async def until(pilot, condition, what: str) -> None:
        deadline = time.monotonic() + 30
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await pilot.pause(0.02)

    app = make_app(
        AppConfig(model="scripted", run_spec=RunSpec(guards=("probe",)), problem="What is 1 + 1?"),
        backend_factory=lambda: ScriptedBackend([split_tokens(t, -0.05) for t in turns()]),
    )
    async with app.run_test(size=(120, 40)) as pilot:
        from tuiagent.ui.guard_state import states_from_chain

        panel = states_from_chain(app.session.chain())
        assert panel["probe"].enabled and [f.name for f in panel["probe"].fields] == ["max_chars"]
        await pilot.press("ctrl+r")
        await until(pilot, lambda: app.screen.finished is not None, "the run to end")
        await pilot.pause(0.1)
        blocks = list(app.screen.query(CodeBlockView))
        assert "PROBE" in text_of(blocks[0]) and "45 chars long" in text_of(blocks[0])
        assert "1 chars short" in text_of(blocks[1])
    run = sorted(paths.runs_dir().glob("*.jsonl"), key=lambda p: p.stat().st_mtime)[-1]
    replay = make_app(AppConfig(model="scripted", screen="replay", replay=run))
    async with replay.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        assert isinstance(replay.screen, ReplayScreen)
        await pilot.press("end")
        await until(pilot, lambda: len(replay.screen.query(CodeBlockView)) == 2, "the replayed code blocks")
        assert "45 chars long" in text_of(replay.screen.query(CodeBlockView).first())
