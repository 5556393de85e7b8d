"""The model's process dies mid-run: the run ends "backend_crashed", the app says what happened and
offers to reload the model (a dialog, and f5); after the reload a new problem runs to its end.

The fast tests use a test double for a dying model; the slow ones kill the real SmolLM2 worker."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest
from textual.widgets import Button, Footer

from tuiagent.backends import crash
from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.core import events as ev
from tuiagent.core.run_spec import RunSpec
from tuiagent.core.trajectory import load
from tuiagent.ui import AppConfig, make_app
from tuiagent.ui.screens.model_crashed import ModelCrashedScreen
from tuiagent.ui.widgets.compare_summary import CompareSummary
from tuiagent.ui.widgets.final_answer import FinalAnswer
from tuiagent.ui.widgets.status_line import StatusLine
from tuiagent.ui.widgets.top_bar import TopBar


class CrashingBackend(ScriptedBackend):
    """Test double for a model whose process dies: a few tokens, then BackendCrashed (the message the
    llama.cpp backend gives for a SIGSEGV), and BackendCrashed at once on every later call."""

    def __init__(self) -> None:
        super().__init__([split_tokens("Let me think about this step by step.", -0.1)], model_id="local")
        self.closed = False

    async def generate(self, out, prompt, sampling, stop):
        async for token in super().generate(out, prompt, sampling, stop):
            yield token
        raise crash.describe(self.model_id, -11, "", "", during="generating")

    async def aclose(self) -> None:
        self.closed = True


MODELS = 'default = "local"\n[models.local]\nbackend = "llama_cpp"\n[models.local.source]\nkind = "path"\npath = "{}"\n'


@pytest.fixture
def local_model(tmp_path, monkeypatch):
    """A maker of apps on a llama_cpp entry of models.toml whose opening (in the app's loading thread)
    gives first a CrashingBackend, then a ScriptedBackend that answers; and the list of those opened."""
    toml = tmp_path / "models.toml"
    toml.write_text(MODELS.format(tmp_path / "local.gguf"), encoding="utf-8")
    made = iter([CrashingBackend(), ScriptedBackend([split_tokens("So \\boxed{4}.", -0.1)], model_id="local")])
    opened = []
    monkeypatch.setattr("tuiagent.ui.session.open_model", lambda spec, request: opened.append(next(made)) or opened[-1])

    def app(**config):
        return make_app(
            AppConfig(
                models_file=toml, problem="What is 2+2?", run_spec=RunSpec(guards=()), out=tmp_path / "runs", **config
            )
        )

    return app, opened


def notices(app) -> str:
    return "\n".join(n.message for n in app._notifications)


def footer_keys(screen) -> list[str]:
    return [k.description for k in screen.query_one(Footer).query("FooterKey")]


@pytest.mark.parametrize("reload_with", ["r", "f5", "f5 later"])
async def test_a_crash_ends_the_run_and_a_reload_brings_the_model_back(ui, tmp_path, local_model, reload_with):
    make, opened = local_model
    app = make()
    async with app.run_test(size=(120, 40)) as pilot:
        solve = app.screen
        await ui.wait_for(pilot, lambda: app.session.state == "ready", 20, "the model to load")
        await pilot.press("ctrl+r")
        await ui.screen_up(pilot, app, ModelCrashedScreen, 30)
        dialog = app.screen
        assert "died with SIGSEGV while generating" in dialog.message
        assert "likely cause:" in dialog.message and "fix:" in dialog.message
        assert "died with SIGSEGV" in app.errors[-1] and not app._notifications  # no toast over the dialog
        assert not solve.running and solve.query_one(StatusLine).state == "backend_crashed"
        assert "the model process crashed" in ui.text(solve.query_one(FinalAnswer))
        assert app.model_state[1] == "crashed" and "crashed" in ui.text(solve.query_one(TopBar))
        events = load(next((tmp_path / "runs").glob("*.jsonl"))).events
        assert events[-1].reason == "backend_crashed" and any(isinstance(e, ev.TokenDelta) for e in events)

        if reload_with in ("r", "f5"):  # the dialog's answer, or the app's key while it is open
            await pilot.press(reload_with)
        else:
            await pilot.press("n")
            await ui.wait_for(pilot, lambda: app.screen is solve, 5, "the dialog to close")
            assert "Reload model" in footer_keys(solve)
            refusals = len(app.errors)
            await pilot.press("ctrl+r")  # refused, with the way out
            await ui.wait_for(pilot, lambda: len(app.errors) > refusals, 10, "the refusal")
            assert not solve.running and "the model crashed: press f5 to reload it" in app.errors[-1]
            await pilot.press("f5")
        await ui.wait_for(pilot, lambda: app.session.state == "ready" and len(opened) == 2, 20, "the reload")
        assert opened[0].closed and app.session.backend is opened[1] and app.screen is solve
        await ui.wait_for(pilot, lambda: "Reload model" not in footer_keys(solve), 10, "f5 to leave the footer")
        assert "Reload model" not in footer_keys(solve)
        await ui.solve(pilot, app)
        assert solve.finished.reason == "answer" and solve.finished.answer == "4"
        assert not isinstance(app.screen, ModelCrashedScreen)


async def test_a_model_that_crashes_while_loading_shows_why(ui, tmp_path, monkeypatch):
    """A worker that dies in its start-up smoke check: the constructor raises BackendCrashed."""
    toml = tmp_path / "models.toml"
    toml.write_text(MODELS.format(tmp_path / "local.gguf"), encoding="utf-8")

    def dies(spec, request):
        raise crash.describe(spec.id, -11, "", "", during="loading the model and running one token (the smoke check)")

    monkeypatch.setattr("tuiagent.ui.session.open_model", dies)
    app = make_app(AppConfig(models_file=toml, problem="1+1"))
    async with app.run_test(size=(120, 40)) as pilot:
        await ui.wait_for(pilot, lambda: app.session.state == "failed", 20, "the load to fail")
        assert "died with SIGSEGV while loading the model" in notices(app) and "likely cause:" in notices(app)
        assert "failed" in ui.text(app.screen.query_one(TopBar))
        refusals = len(app.errors)
        await pilot.press("ctrl+r")
        await ui.wait_for(pilot, lambda: len(app.errors) > refusals, 10, "the refusal")
        assert "no model: the model process for 'local' died with SIGSEGV" in app.errors[-1]
        assert "Reload model" in footer_keys(app.screen)


async def test_compare_a_crash_ends_every_column(ui, tmp_path, local_model):
    make, opened = local_model
    app = make(screen="compare")
    async with app.run_test(size=(120, 40)) as pilot:
        compare = app.screen
        await ui.wait_for(pilot, lambda: app.session.state == "ready", 20, "the model to load")
        await pilot.press("ctrl+r")
        await ui.screen_up(pilot, app, ModelCrashedScreen, 30)
        assert [evs[-1].reason for evs in compare.events] == ["backend_crashed", "backend_crashed"]
        summary = [ui.text(s) for s in compare.query_one(CompareSummary).query("Static")]
        assert len(summary) == 2 and all("backend_crashed" in s for s in summary)
        assert compare.query_one("#compare-stop", Button).disabled  # the comparison is over: nothing hangs
        assert not compare.query_one("#compare-run", Button).disabled
        await pilot.press("r")
        await ui.wait_for(pilot, lambda: app.session.state == "ready" and len(opened) == 2, 20, "the reload")


# -- the real model -----------------------------------------------------------------------------


@pytest.fixture
def smollm2():
    from tuiagent.config.loader import load_models
    from tuiagent.config.sources import resolve_model_file

    try:
        resolve_model_file(load_models().get("smollm2-135m"))
        import llama_cpp  # noqa: F401
    except Exception as e:  # noqa: BLE001 - no model here: skip, saying why
        pytest.skip(f"SmolLM2-135M is not available: {type(e).__name__}: {e}")
    return "smollm2-135m"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGKILL], ids=["SIGSEGV", "SIGKILL"])
async def test_the_real_model_killed_mid_run_is_reloaded(ui, tmp_path, monkeypatch, smollm2, sig):
    monkeypatch.setenv("TUIAGENT_CACHE_DIR", str(tmp_path / "cache"))  # the dead worker's log is kept there
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    runs = tmp_path / "runs"
    settings = RunSpec(guards=(), run={"max_tokens": 160, "max_tool_calls": 1})
    app = make_app(
        AppConfig(
            model=smollm2,
            problem="Count from 1 to 50, one number a line, then add them up.",
            run_spec=settings,
            out=runs,
        )
    )
    started: dict[int, psutil.Process] = {}  # every process the app starts: model workers, kernels

    def watch(done: bool) -> bool:
        started.update((p.pid, p) for p in psutil.Process().children(recursive=True) if p.pid not in before)
        return done

    async with app.run_test(size=(120, 40)) as pilot:
        solve = app.screen
        await ui.wait_for(pilot, lambda: app.session.state == "ready", 120, "the model to load")
        first = app.session.backend
        await pilot.press("ctrl+r")
        await ui.wait_for(pilot, lambda: watch(solve.query_one(StatusLine).tokens >= 3), 120, "tokens to stream")
        os.kill(first.worker_pid, sig)
        await ui.screen_up(pilot, app, ModelCrashedScreen, 60)
        assert f"died with {sig.name} while generating" in app.screen.message
        assert not first.alive and Path(first.log_path).is_relative_to(tmp_path)
        loaded = load(next(runs.glob("*.jsonl")))
        assert loaded.warnings == []
        assert isinstance(loaded.events[-1], ev.RunFinished) and loaded.events[-1].reason == "backend_crashed"
        await pilot.press("n")
        await pilot.press("f5")
        await ui.wait_for(
            pilot, lambda: app.session.state == "ready" and app.session.backend is not None, 120, "the reload"
        )
        second = app.session.backend
        assert second is not first and second.alive and second.worker_pid != first.worker_pid
        await pilot.press("ctrl+r")
        await ui.wait_for(pilot, lambda: watch(solve.running), 10, "the second run to start")
        await ui.wait_for(pilot, lambda: watch(not solve.running), 300, "the second run to end")
        assert solve.finished.reason not in ("backend_crashed", "error", "cancelled"), solve.finished
        await pilot.press("ctrl+q")
        await ui.wait_for(pilot, lambda: not app.is_running, 30, "the app to quit")
    assert {first.worker_pid, second.worker_pid} <= set(started) and len(started) >= 4  # and two kernels
    assert psutil.wait_procs(list(started.values()), timeout=10)[1] == []  # no worker, no kernel left
