"""Presets: shipped and the user's, validated with the file named, shared by solve and eval."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuiagent.errors import ConfigError
from tuiagent.presets import load_presets, resolve_settings, user_presets_file


def write_user_presets(text: str) -> Path:
    path = user_presets_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


STRICT = """
[presets.strict]
description = "ATTC with a stricter threshold and a small budget"
guards = ["attc"]
run = { max_tool_calls = 1 }
sampling = { temperature = 0.0 }
[presets.strict.guard_settings.attc]
threshold = 0.99
"""


def test_shipped_presets_and_the_users_own():
    shipped = load_presets()
    assert shipped["flag-only"].spec.guards == ("necessity", "tim") and shipped["flag-only"].description
    write_user_presets(STRICT + '\n[presets.light]\nguards = ["prunetir"]\n')
    presets = load_presets()
    strict = presets["strict"]
    assert (strict.spec.guards, strict.spec.guard_settings, strict.spec.run) == (
        ("attc",),
        {"attc": {"threshold": 0.99}},
        {"max_tool_calls": 1},
    )
    assert presets["light"].spec.guards == ("prunetir",) and presets["light"].origin == str(user_presets_file())
    assert [s.name for s in resolve_settings(["none", "strict"], named=presets)] == ["none", "strict"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[presets.x]\nguards = ["attcc"]\n', "'attcc' is not an installed guard"),
        ('[presets.x]\nguards = ["attc"]\ncolour = "red"\n', "unknown key(s) colour"),
        (
            '[presets.x]\nguards = ["attc"]\n[presets.x.guard_settings.gstep]\ntau = 0.5\n',
            "sets gstep, which it does not turn on",
        ),
        ('[presets.x]\nguards = ["attc"]\nrun = { budget = 3 }\n', "unknown run setting 'budget'"),
        ("[presets.x\n", "not valid TOML"),
    ],
)
def test_mistakes_name_the_file(text, message):
    path = write_user_presets(text)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        load_presets()
    assert str(path) in str(err.value)


def solve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuiagent", "solve", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
    )


def test_a_sampling_tables_max_tokens_is_one_turns(tmp_path):
    from tuiagent.presets import load_preset_file

    path = tmp_path / "p.toml"
    path.write_text("[presets.short]\nguards = []\nsampling = { max_tokens = 128 }\nrun = { max_tokens = 900 }\n")
    short = load_preset_file(path)["short"]
    assert short.spec.sampling == {"max_tokens": 128} and short.spec.run == {"max_tokens": 900}


def test_solve_runs_a_preset_and_the_command_line_wins(write_script, tmp_path):
    write_user_presets(STRICT)
    script = write_script("\\boxed{3}")
    base = ("1+2", "-m", "scripted", "--script", str(script), "--json", "--out", str(tmp_path))
    started = json.loads(solve(*base, "--preset", "strict").stdout.splitlines()[0])
    assert started["settings"]["max_tool_calls"] == 1 and started["sampling"]["temperature"] == 0.0
    out = solve(*base, "--preset", "strict", "--max-tool-calls", "3", "--set", "attc.threshold=0.9")
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert events[0]["settings"]["max_tool_calls"] == 3
    on = [e for e in events if e["type"] == "GuardToggled" and e["enabled"]]
    assert [(e["guard"], e["settings"]["threshold"]) for e in on] == [("attc", 0.9)]
    missing = solve(*base, "--preset", "nope")
    assert missing.returncode == 2 and "no preset 'nope'" in missing.stderr and "flag-only" in missing.stderr
