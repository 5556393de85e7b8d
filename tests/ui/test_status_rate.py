"""The status line's tokens per second: the streaming turn's, never a burst of a fork's taken-over tokens."""

from __future__ import annotations

import pytest

import tuiagent.ui.widgets.status_line as status_line
from tuiagent.core import events as ev
from tuiagent.ui.widgets.status_line import StatusLine


def test_a_forks_taken_over_tokens_do_not_count_in_the_rate(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(status_line.time, "monotonic", lambda: now[0])
    line = StatusLine()
    line.observe(ev.TurnStarted(turn=1, context_tokens=50))
    for _ in range(300):  # the parent's turn, taken over in a microsecond
        now[0] += 1e-6
        line.observe(ev.TokenDelta(turn=1, text="x", logprob=-0.1))
    line.observe(ev.TurnStarted(turn=2, context_tokens=400))
    for _ in range(11):  # the fork's own turn: 10 tokens a second
        now[0] += 0.1
        line.observe(ev.TokenDelta(turn=2, text="y", logprob=-0.1))
    assert line.rate() == pytest.approx(10.0)
    assert line.tokens == 311
