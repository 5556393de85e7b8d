"""Text from a problem, the model, the kernel or a trajectory file never drives the user's terminal:
`solve`'s transcript, `replay --print` and `compare --print` show control sequences as visible
placeholders, and the trajectory keeps them verbatim."""

from __future__ import annotations

import json

import pytest

from tests.test_cli import tuiagent
from tuiagent.safetext import for_terminal

HOSTILE = {
    "OSC 52 clipboard write": "\x1b]52;c;cm0gLXJmIH4=\x07",
    "OSC title": "\x1b]0;pwned\x1b\\",
    "clear screen": "\x1b[2J\x1b[H",
    "DCS": "\x1bP+q544e\x1b\\",
    "8-bit CSI": "\x9b2J",
    "8-bit OSC": "\x9d0;pwned\x9c",
    "carriage return overwrite": "safe\rEVIL",
    "bell and backspace": "\x07\x08\x08",
    "bidi override": "if admin\u202e } \u2066",
    "DEL": "\x7f",
}


def inert(text: str) -> bool:
    return not any(
        (ord(c) < 0x20 and c not in "\t\n")
        or 0x7F <= ord(c) <= 0x9F
        or 0x202A <= ord(c) <= 0x202E
        or 0x2066 <= ord(c) <= 0x2069
        for c in text
    )


@pytest.mark.parametrize("name", list(HOSTILE))
def test_every_control_sequence_is_shown_as_a_visible_placeholder(name):
    shown = for_terminal(f"before {HOSTILE[name]} after")
    assert inert(shown) and shown.startswith("before ") and shown.endswith(" after")
    assert len(shown) >= len(f"before {HOSTILE[name]} after") - 1  # nothing silently dropped (CRLF aside)


def test_plain_text_newlines_tabs_and_unicode_pass_unchanged():
    text = "x = 1\n\tprint(x)  # ∑ λ 数学 🙂"
    assert for_terminal(text) is text
    assert for_terminal("a\r\nb") == "a\nb"


def test_solve_replay_and_compare_show_hostile_text_inert_and_keep_it_verbatim(write_script, tmp_path):
    payload = "".join(HOSTILE.values())
    problem = f"What is 6*7? {payload}"
    script = write_script(
        f"Thinking {payload}\n```python\nprint({payload!r})\n```\n```output", f"So \\boxed{{42}} {payload}"
    )
    out = tuiagent("solve", problem, "-m", "scripted", "--script", str(script), "--out", str(tmp_path / "runs"))
    assert out.returncode == 0, out.stderr
    assert inert(out.stdout) and "␛]52;c;" in out.stdout and "answer: 42" in out.stdout
    trajectory = next((tmp_path / "runs").glob("*.jsonl"))
    events = [json.loads(line) for line in trajectory.read_text(encoding="utf-8").splitlines()]
    assert next(e for e in events if e.get("type") == "RunStarted")["problem"] == problem  # verbatim in the file

    replayed = tuiagent("replay", str(trajectory), "--print")
    assert replayed.returncode == 0 and inert(replayed.stdout) and "␛]52;c;" in replayed.stdout
    compared = tuiagent("compare", str(trajectory), str(trajectory), "--print")
    assert compared.returncode == 0 and inert(compared.stdout + compared.stderr)


def test_the_apps_widgets_show_hostile_text_inert():
    from tuiagent.core import events as ev
    from tuiagent.ui.widgets.note_line import NoteLine
    from tuiagent.ui.widgets.tool_output import output_text
    from tuiagent.ui.widgets.turn_text import render_turn

    payload = "".join(HOSTILE.values())
    assert inert(render_turn(f"prose {payload}\n```python\nprint({payload!r})\n```").plain)
    result = ev.ToolResult(
        call=1,
        shown=payload,
        error=False,
        timed_out=False,
        duration_s=0.1,
        outputs=[{"kind": "stdout", "text": payload}],
    )
    assert inert(output_text(result)) and "␛]52" in output_text(result)
    assert inert(NoteLine(1, "note", "guard", payload).render().plain)
