"""A live comparison on a local llama.cpp model runs its columns together on the batched engine
(a second worker, one sequence a column), opened once and kept; elsewhere columns keep the run
backend. The fast test uses doubles for both engines; the slow one runs SmolLM2 for real."""

from __future__ import annotations

import asyncio
import time

import psutil
import pytest

from tuiagent.backends.scripted import ScriptedBackend, split_tokens
from tuiagent.core import events as ev
from tuiagent.core.run_spec import RunSpec
from tuiagent.ui import AppConfig, make_app
from tuiagent.ui.screens.compare import CompareScreen

MODELS = 'default = "local"\n[models.local]\nbackend = "llama_cpp"\n[models.local.source]\nkind = "path"\npath = "{}"\n'


class AnswerEveryStream(ScriptedBackend):
    """Test double for the batched engine: every stream gets the same answer; it counts the streams
    open at once (columns that ran together overlap). A stream waits (up to 10 s) for the rest of its
    round to open, so a column whose kernel started late on a loaded machine still overlaps; columns run
    one after another never do."""

    def __init__(self, n_seq: int) -> None:
        super().__init__([split_tokens("So \\boxed{4}.", -0.1)], model_id="local", delay_s=0.3)
        self.n_seq, self.open, self.most_open, self.streams, self.closed = n_seq, 0, 0, 0, False
        self.sessions_closed = 0

    async def generate(self, out, prompt, sampling, stop):
        self.streams += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        round_opened = -(-self.streams // self.n_seq) * self.n_seq
        deadline = time.monotonic() + 10
        while self.streams < round_opened and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        self._next = 0
        try:
            async for token in super().generate(out, prompt, sampling, stop):
                yield token
        finally:
            self.open -= 1

    def session(self):
        engine = self

        class Session:  # one column's view: closing it ends the session, not the engine
            def __getattr__(self, name):
                return getattr(engine, name)

            async def aclose(self) -> None:
                engine.sessions_closed += 1

        return Session()

    async def aclose(self) -> None:
        self.closed = True


async def test_columns_of_a_local_model_run_together_on_one_batched_engine(ui, tmp_path, monkeypatch):
    toml = tmp_path / "models.toml"
    toml.write_text(MODELS.format(tmp_path / "local.gguf"), encoding="utf-8")
    single = ScriptedBackend([split_tokens("unused", -0.1)], model_id="local")
    monkeypatch.setattr("tuiagent.ui.session.open_model", lambda spec, request: single)
    opened: list[AnswerEveryStream] = []
    monkeypatch.setattr(
        "tuiagent.backends.open_backend", lambda spec, n_seq: opened.append(AnswerEveryStream(n_seq)) or opened[-1]
    )
    app = make_app(
        AppConfig(
            models_file=toml,
            problem="What is 2+2?",
            gold="4",
            screen="compare",
            columns=("none", "tim", "necessity"),
            out=tmp_path / "runs",
        )
    )
    async with app.run_test(size=(150, 40)) as pilot:
        screen = await ui.screen_up(pilot, app, CompareScreen)
        for _round in (1, 2):
            await pilot.press("ctrl+r")
            await ui.wait_for(
                pilot,
                lambda: (
                    len(screen.events) == 3
                    and all(any(isinstance(e, ev.RunFinished) for e in evs) for evs in screen.events)
                ),
                60,
                "three columns",
            )
            await ui.wait_for(pilot, lambda: not screen.query_one("#compare-run").disabled, 30, "run enabled again")
            assert [next(e.answer for e in evs if isinstance(e, ev.RunFinished)) for evs in screen.events] == ["4"] * 3
        assert len(opened) == 1 and opened[0].n_seq == 3, "opened once, one sequence a column, then kept"
        assert opened[0].streams == 6 and opened[0].most_open == 3, "the columns ran together"
        assert opened[0].sessions_closed == 6 and not opened[0].closed, "a session a column, the engine kept"
        assert single._next == 0, "nothing went to the app's own engine"
        await app.action_quit()
    assert opened[0].closed


@pytest.mark.slow
async def test_columns_run_together_on_the_real_batched_engine(ui, tmp_path):
    from tests.backends.conftest import _resolve

    path, why = _resolve("smollm2-135m")
    if path is None:
        pytest.skip(why)
    toml = tmp_path / "models.toml"
    toml.write_text(
        MODELS.format(path).replace('backend = "llama_cpp"\n', 'backend = "llama_cpp"\ncontext_size = 2048\n'),
        encoding="utf-8",
    )
    app = make_app(
        AppConfig(
            models_file=toml,
            problem="What is 17 * 23?",
            screen="compare",
            columns=("none", "tim"),
            run_spec=RunSpec(run={"max_tokens": 60, "max_tool_calls": 1}),
            out=tmp_path / "runs",
        )
    )
    async with app.run_test(size=(150, 40)) as pilot:
        screen = app.screen
        await ui.wait_for(pilot, lambda: app.session.state in ("ready", "failed"), 120, "the model loaded")
        assert app.session.state == "ready", app.session.error
        await pilot.press("ctrl+r")
        await ui.wait_for(
            pilot,
            lambda: (
                len(screen.events) == 2
                and all(any(isinstance(e, ev.RunFinished) for e in evs) for evs in screen.events)
            ),
            300,
            "both columns",
        )
        batched = app.session.batched
        assert batched is not None and batched.n_seq == 2 and batched.alive
        turns = [[e for e in evs if isinstance(e, ev.TurnEnded)] for evs in screen.events]
        assert all(t and t[0].layout == "batched" for t in turns)
        # none and tim generate the same tokens, together as alone
        assert [t.token_ids for t in turns[0]] == [t.token_ids for t in turns[1]]
        first_tokens = [next(i for i, e in enumerate(evs) if isinstance(e, ev.TokenDelta)) for evs in screen.events]
        assert all(first_tokens)
        worker = batched.worker_pid
        await app.action_quit()
    assert not psutil.pid_exists(worker) or psutil.Process(worker).status() == psutil.STATUS_ZOMBIE
