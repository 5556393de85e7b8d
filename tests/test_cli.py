"""The command line as a person uses it: real processes, real exit codes, no tracebacks on mistakes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def tuiagent(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuiagent", *args], capture_output=True, text=True, input=input, timeout=120
    )


def test_help_everywhere():
    for args in ([], ["solve"], ["models"], ["fetch"], ["replay"]):
        out = tuiagent(*args, "--help")
        assert out.returncode == 0, out.stderr
        assert "Usage" in out.stdout


def test_scripted_solve_json_then_replay(write_script, tmp_path):
    script = write_script("Six sevens.\n```python\nprint(6 * 7)\n```\n```output", "So \\boxed{42}.")
    out = tuiagent(
        "solve",
        "What is 6 times 7?",
        "-m",
        "scripted",
        "--script",
        str(script),
        "--gold",
        "42",
        "--json",
        "--out",
        str(tmp_path / "runs"),
    )
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines()]
    last = events[-1]
    assert last["type"] == "RunFinished"
    assert (last["answer"], last["correct"], last["tool_calls"], last["erroneous_calls"]) == ("42", True, 1, 0)
    assert {"generated_tokens", "context_tokens", "wall_s", "trajectory"} <= last.keys()
    tool = next(e for e in events if e["type"] == "ToolResult")
    assert tool["shown"] == "42"  # the real kernel ran the code
    printed = tuiagent("replay", last["trajectory"], "--print")
    assert printed.returncode == 0 and "answer: 42" in printed.stdout and "print(6 * 7)" in printed.stdout


def test_problem_from_stdin(write_script, tmp_path):
    script = write_script("\\boxed{3}")
    out = tuiagent(
        "solve",
        "-",
        "-m",
        "scripted",
        "--script",
        str(script),
        "--no-tool",
        "--out",
        str(tmp_path),
        input="What is 1 + 2?\n",
    )
    assert out.returncode == 0 and "answer: 3" in out.stdout


@pytest.mark.parametrize(
    "toml, expected",
    [
        ("default = [", "models.toml"),
        ('[models.x]\nbackend = "tensorflow"\n[models.x.source]\nkind = "path"\npath = "/x"\n', "backend"),
    ],
)
def test_config_mistakes_exit_2_without_traceback(tmp_path, toml, expected):
    bad = tmp_path / "models.toml"
    bad.write_text(toml)
    out = tuiagent("solve", "1+1", "--models", str(bad))
    assert out.returncode == 2
    assert expected in out.stderr and "fix" in out.stderr and "Traceback" not in out.stderr


def test_unknown_model_and_missing_files(tmp_path):
    for args in (
        ["-m", "nope"],
        ["--models", str(tmp_path / "missing.toml")],
        ["-m", "scripted", "--script", str(tmp_path / "no.jsonl")],
    ):
        out = tuiagent("solve", "1+1", *args)
        assert out.returncode == 2, (args, out.stderr)
        assert "fix" in out.stderr and "Traceback" not in out.stderr


def test_replay_rejects_non_trajectory(tmp_path):
    bogus = tmp_path / "x.jsonl"
    bogus.write_text("hello\n")
    out = tuiagent("replay", str(bogus), "--print")
    assert out.returncode == 1 and "not a tuiagent trajectory" in out.stderr


def test_replay_and_compare_warn_about_a_damaged_trajectory(tmp_path):
    golden = Path(__file__).resolve().parent / "ui" / "data"
    lines = (golden / "guarded.jsonl").read_text(encoding="utf-8").splitlines()
    bad = next(i for i, line in enumerate(lines) if '"CodeBlock"' in line)
    lines[bad] = '{"type": "CodeBlock", "turn": 1'  # a hand edit gone wrong
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text("\n".join(lines) + "\n", encoding="utf-8")
    warning = f"warning: {damaged}:{bad + 1}: not valid JSON; line skipped"

    out = tuiagent("replay", str(damaged), "--print")
    assert out.returncode == 0 and warning in out.stderr and "Traceback" not in out.stderr
    assert "answer: 338350" in out.stdout  # the rest of the run is there

    out = tuiagent("compare", str(damaged), str(golden / "plain.jsonl"), "--print")
    assert out.returncode == 0 and out.stderr.count("warning:") == 1 and warning in out.stderr
    assert "damaged.jsonl: guards" in out.stdout and "plain.jsonl: guards" in out.stdout


def test_importing_tuiagent_loads_no_backend():
    code = (
        "import tuiagent, tuiagent.cli, tuiagent.runner, tuiagent.core.loop, sys; "
        "bad = {'llama_cpp', 'vllm', 'torch', 'textual'} & set(sys.modules); assert not bad, bad"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def test_import_contracts():
    lint = Path(sys.executable).parent / "lint-imports"
    out = subprocess.run([str(lint)], capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--set", "bad"],
        ["--guard", "nope"],
        ["--guard", "attc", "--set", "attc.threshold=2"],
        ["--set", "gstep.tau=0.5"],
        ["--guard", "attc", "--set", "gstep.tau=0.5"],
    ],
)
def test_guard_option_mistakes_exit_2(write_script, tmp_path, args):
    script = write_script("\\boxed{3}")
    out = tuiagent("solve", "1+2", "-m", "scripted", "--script", str(script), "--out", str(tmp_path), *args)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and ("--set" in out.stderr or "--guard" in out.stderr)


def test_guard_that_cannot_start_is_reported_and_the_run_goes_on(write_script, tmp_path):
    script = write_script("\\boxed{3}")
    out = tuiagent(
        "solve",
        "1+2",
        "-m",
        "scripted",
        "--script",
        str(script),
        "--out",
        str(tmp_path),
        "--guard",
        "gstep",
        "--set",
        f"gstep.weights={tmp_path / 'missing.npz'}",
    )
    assert out.returncode == 0 and "[gstep] off" in out.stdout and "answer: 3" in out.stdout


def test_a_setting_for_a_guard_that_is_off_is_an_error_not_silence(write_script, tmp_path):
    script = write_script("\\boxed{3}")
    out = tuiagent(
        "solve", "1+2", "-m", "scripted", "--script", str(script), "--out", str(tmp_path), "--set", "gstep.tau=0.5"
    )
    assert out.returncode == 2 and "'gstep', which is not on" in out.stderr and "--guard gstep" in out.stderr


def test_the_transcript_header_lists_the_guards_in_force(write_script, tmp_path):
    script = write_script("\\boxed{3}")
    base = ("solve", "1+2", "-m", "scripted", "--script", str(script), "--out", str(tmp_path))
    out = tuiagent(*base, "--guard", "attc", "--set", "attc.threshold=0.9")
    assert out.returncode == 0 and "guard attc on: threshold=0.9" in out.stdout
    default = tuiagent(*base).stdout  # solve starts from the app's default preset
    assert "guard necessity on: judge=arithmetic mode=flag" in default and "guard tim on:" in default
    assert "guards: none" in tuiagent(*base, "--preset", "none").stdout


def test_replay_print_of_a_run_with_no_end_says_it_is_incomplete(tmp_path):
    golden = Path(__file__).resolve().parent / "ui" / "data" / "guarded.jsonl"
    lines = golden.read_text(encoding="utf-8").splitlines()
    cut = tmp_path / "crashed.jsonl"
    cut.write_text("\n".join(lines[: len(lines) // 2]) + "\n", encoding="utf-8")  # as a kill -9 leaves it
    out = tuiagent("replay", str(cut), "--print")
    assert out.returncode == 1 and "incomplete:" in out.stderr and "Traceback" not in out.stderr
    assert "── turn 1" in out.stdout  # everything recorded is still printed
    whole = tuiagent("replay", str(golden), "--print")
    assert whole.returncode == 0 and "3 tool calls (1 erroneous)" in whole.stdout
