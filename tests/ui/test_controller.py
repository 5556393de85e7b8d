"""The app's headless controller (tuiagent/ui/controller.py), without Textual: the model's states,
a crash, what a fork runs under, a preset's run settings."""

from pathlib import Path

import pytest

from tuiagent.core import events as ev
from tuiagent.core.run_spec import RunSpec
from tuiagent.errors import UserError
from tuiagent.ui.controller import AS_RECORDED, AppConfig, AppController

PLAIN = Path(__file__).parent / "data" / "plain.jsonl"


class Held:
    """A loaded model the app shares between runs (only closed here)."""

    closed = False

    async def aclose(self) -> None:
        self.closed = True


def controller(**config) -> tuple[AppController, list[tuple[str, str, str]]]:
    heard: list[tuple[str, str, str]] = []
    backend = config.pop("backend", None)
    c = AppController(AppConfig(model="scripted", **config), backend=backend, on_model_state=heard.append)
    return c, heard


def test_a_scripted_model_is_ready_without_loading_and_a_bad_entry_fails_with_why(tmp_path):
    c, heard = controller()
    c.start()
    assert not c.needs_load() and heard[-1] == ("scripted", "ready", "") and c.refusal() is None
    bad = tmp_path / "models.toml"
    bad.write_text("[models.x\n", encoding="utf-8")
    c, heard = controller(models_file=bad)
    with pytest.raises(UserError):
        c.start()
    assert heard[-1][1:] == ("failed", "bad config") and c.refusal()


def test_a_crash_of_the_shared_model_is_marked_once_and_refuses_runs():
    c, heard = controller(backend=Held())
    c.start()
    c.needs_load()
    died = [ev.Notice(level="error", message="died with SIGSEGV")]
    assert c.crashed(died) == "died with SIGSEGV"
    assert heard[-1] == ("scripted", "crashed", "f5 reloads") and "press f5" in (c.refusal() or "")
    assert c.crashed(died) is None and c.errors == ["the model crashed: died with SIGSEGV"]  # known already
    alone, _ = controller()  # a per-run backend dies alone: the next run opens another
    alone.start()
    assert alone.crashed(died) is None and alone.refusal() is None


async def test_a_model_change_keeps_the_guard_choices_and_closes_the_old_model():
    held = Held()
    c, heard = controller(backend=held)
    c.start()
    c.session.remember("attc", enabled=True, settings={"threshold": 0.9})
    assert await c.change_model("scripted") is False  # scripted: ready at once
    assert held.closed and c.session.enabled >= {"attc"} and c.session.overrides["attc"] == {"threshold": 0.9}
    assert heard[-1] == ("scripted", "ready", "")
    with pytest.raises(UserError):
        await c.change_model("no-such-model")
    assert heard[-1][1] == "failed"


def test_a_fork_runs_under_the_parents_settings_first_and_a_bad_step_says_why():
    c, _ = controller()
    c.start()
    with pytest.raises(UserError, match="'two' is not a step number"):
        c.fork_step(PLAIN, "two")
    at, point = c.fork_step(PLAIN, "1")
    choices = c.fork_choices(point)
    assert at == 1 and [p.name for p in choices[:3]] == [AS_RECORDED, "none", "all"]
    assert "repeats its next step exactly" in choices[0].description


def test_a_presets_run_settings_reach_the_next_run_and_its_guards_stay_the_panels():
    c, _ = controller(run_spec=RunSpec(guards=("attc",)))
    c.start()
    c.use_run_settings(RunSpec(guards=("tim",), run={"max_tool_calls": 2}))
    assert c.config.run_spec.guards == () and c.session.run_spec().run == {"max_tool_calls": 2}
    assert c.session.run_spec().guards == ("attc",)  # the panel's choice
