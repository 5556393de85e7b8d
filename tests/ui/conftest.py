"""Fixtures for the app's tests: a scripted backend per run (fast, deterministic) and the real kernel."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tuiagent.backends.scripted import ScriptedBackend, load_script
from tuiagent.core.run_spec import RunSpec
from tuiagent.ui import AppConfig, make_app

DATA = Path(__file__).resolve().parent / "data"
GATE = DATA / "gate.npz"
PROBLEM = "What is the sum of the squares of the first 100 positive integers?"


def scripted_app(
    turns_file: Path | list,
    *,
    delay_s: float = 0.001,
    size: tuple[int, int] = (100, 30),
    backend: type[ScriptedBackend] = ScriptedBackend,
    **config,
):
    """An app whose runs replay ``turns_file`` (a script file, or a list of turn dicts) at ``delay_s`` a
    token, on ``backend`` (a test double deriving from ScriptedBackend)."""
    if isinstance(turns_file, list):
        path = Path(config.pop("tmp_path")) / "script.jsonl"
        path.write_text("".join(json.dumps(t) + "\n" for t in turns_file), encoding="utf-8")
        turns_file = path
    turns = load_script(Path(turns_file))
    spec = RunSpec(
        guards=config.pop("guards", ("all",)),
        guard_settings=config.pop("guard_settings", {"gstep": {"weights": str(GATE)}}),
    )
    cfg = AppConfig(model="scripted", run_spec=spec, **config)
    return make_app(cfg, backend_factory=lambda: backend([list(t) for t in turns], delay_s=delay_s))


async def wait_for(pilot, condition: Callable[[], bool], timeout: float = 30.0, what: str = "") -> float:
    """Let the app run until ``condition()`` holds; returns the seconds it took (fails after ``timeout``)."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or condition}")
        await pilot.pause(0.02)
    return time.monotonic() - start


def runs_over(app) -> bool:
    """No run worker of ``app`` is waiting or going: a run's end has been handled to its last line."""
    return not any(w.group == "run" and not w.is_finished for w in app.workers)


async def screen_up(pilot, app, kind: type | None = None, timeout: float = 30.0):
    """Wait until the app shows a mounted screen (of ``kind``): composed, its on_mount run; returns it."""
    name = kind.__name__ if kind is not None else "the app's screen"
    await wait_for(
        pilot,
        lambda: (kind is None or isinstance(app.screen, kind)) and app.screen.is_mounted,
        timeout,
        f"{name} to be up",
    )
    return app.screen


def run_file(app) -> Path:
    """The trajectory of the app's last run (the newest file in the runs dir)."""
    from tuiagent import paths

    files = sorted(paths.runs_dir().glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    assert files, "no trajectory was written"
    return files[-1]


@pytest.fixture
def guarded_script() -> Path:
    return DATA / "guarded_script.jsonl"


@pytest.fixture
def data_dir() -> Path:
    return DATA


class UI:
    """Helpers for the app's tests (importlib mode: tests get them through the ``ui`` fixture)."""

    PROBLEM = PROBLEM
    DATA = DATA
    GATE = GATE
    scripted_app = staticmethod(scripted_app)
    wait_for = staticmethod(wait_for)
    runs_over = staticmethod(runs_over)
    screen_up = staticmethod(screen_up)
    run_file = staticmethod(run_file)

    @staticmethod
    def text(widget) -> str:
        """What a widget draws, as plain text."""
        return widget.render().plain

    @staticmethod
    async def solve(pilot, app, timeout: float = 60.0) -> None:
        """Press ctrl+r once the screen is up, and wait for the run to end."""
        await wait_for(pilot, lambda: app.screen.is_mounted and app.screen.focused is not None, 30, "the screen")
        await pilot.pause()
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.screen.running or app.screen.finished is not None, 30, "the run to start")
        await wait_for(pilot, lambda: not app.screen.running, timeout, "the run to end")
        await wait_for(pilot, lambda: runs_over(app), 30, "the run's worker to finish")
        await pilot.pause()


@pytest.fixture
def ui() -> type[UI]:
    return UI
