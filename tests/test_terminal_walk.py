"""Every command that prints a field read from a file, run on a real terminal (a pseudo-terminal): no
escape sequence, C1 control or bidi override from the file reaches it; each is shown as a visible
placeholder (tuiagent.safetext). Piped, export keeps the bytes as they are. The files: a trajectory
with the payload in its problem, model name and a crafted settings value; a dataset whose problem
id carries it; a models.toml and a presets.toml whose descriptions and values do; the eval results
made from them (issue 40, item 4)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tuiagent import paths

PAYLOAD = "\x1b]0;pwned\x07\x1b]52;c;cm0=\x1b\\\x1b[2J\x9b2J\x9d0;x\x9c\u202eevil"
RAW = ("\x1b]0;", "\x1b]52", "\x1b[2J", "\x9b", "\x9d", "\u202e")  # what must never reach the terminal


def on_a_terminal(*args: str, timeout: float = 120) -> tuple[int, str]:
    """Run ``tuiagent ARGS`` with a pseudo-terminal as its stdin, stdout and stderr; its exit code and
    everything it wrote."""
    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="200")
    process = subprocess.Popen([sys.executable, "-m", "tuiagent", *args], stdin=side, stdout=side, stderr=side, env=env)
    os.close(side)
    out, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the process closed its side and everything was read
                break
            if not chunk:
                break
            out += chunk
        elif process.poll() is not None:
            break
    else:
        process.kill()
    process.wait()
    os.close(main)
    return process.returncode, out.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The hostile files, and a run made from them, in a data and config directory of their own."""
    base = tmp_path_factory.mktemp("walk")
    script = base / "script.jsonl"
    script.write_text(
        json.dumps({"text": "Let me compute.\n```python\nprint(6 * 7)\n```\n```output", "logprob": -0.01})
        + "\n"
        + json.dumps({"text": f"So \\boxed{{42}}. {PAYLOAD}", "logprob": -0.01})
        + "\n"
    )
    dataset = base / "data.jsonl"
    dataset.write_text(
        json.dumps({"id": f"p1 {PAYLOAD}", "question": f"What is 6*7? {PAYLOAD}", "answer": "42"}) + "\n"
    )
    escaped = json.dumps(PAYLOAD)  # a TOML basic string takes JSON's escapes
    models = base / "models.toml"
    models.write_text(
        f'[models.hostile]\nbackend = "scripted"\ndescription = {escaped}\n'
        f'[models.hostile.source]\nkind = "script"\npath = "{script}"\n'
        f"[models.hostile.guards.gstep]\nweights = {escaped}\n"
    )
    config = base / "config"
    config.mkdir()
    (config / "presets.toml").write_text(f'[presets.mine]\ndescription = {escaped}\nguards = ["attc"]\n')
    data = base / "data"
    env = {paths.DATA_ENV: str(data), paths.CONFIG_ENV: str(config)}
    return {"base": base, "script": script, "dataset": dataset, "models": models, "env": env}


@pytest.fixture
def walk_env(files, monkeypatch):
    for key, value in files["env"].items():
        monkeypatch.setenv(key, value)
    return files


def hostile_run(files) -> Path:
    """A run solved from the hostile problem, its RunStarted then given a crafted model and settings value."""
    runs = Path(files["env"][paths.DATA_ENV]) / "runs"
    if not list(runs.glob("*.jsonl")):
        done = subprocess.run(
            [sys.executable, "-m", "tuiagent", "solve", f"What is 6*7? {PAYLOAD}", "-m", "scripted"]
            + ["--script", str(files["script"])],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ, **files["env"]),
        )
        assert done.returncode == 0, done.stderr
        (path,) = runs.glob("*.jsonl")
        events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        started = next(e for e in events if e.get("type") == "RunStarted")
        started["model"] = f"scripted {PAYLOAD}"
        started["settings"]["mode"] = f"tool {PAYLOAD}"
        path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    (path,) = runs.glob("*.jsonl")
    return path


def copied_results(files, evals: str) -> str:
    """The eval's directory copied, its records' dataset and setting names replaced with the payload."""
    import shutil

    copy = files["base"] / "copied"
    if not copy.exists():
        if not Path(evals, "results.jsonl").exists():
            assert on_a_terminal(*eval_command(files, evals))[0] == 0
        shutil.copytree(evals, copy)
        results = copy / "results.jsonl"
        records = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]
        for record in records:
            record.update(dataset=f"data {PAYLOAD}", setting=f"none {PAYLOAD}")
        results.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(copy)


def renamed_copy(run: str) -> str:
    """The run copied under a file name that carries the payload (compare prints the names)."""
    import shutil

    copy = Path(run).parents[1] / f"copy {PAYLOAD}.jsonl"  # beside the runs directory, not in it
    shutil.copyfile(run, copy)
    return str(copy)


def eval_command(files, out: str) -> list[str]:
    return [
        "eval",
        str(files["dataset"]),
        "-m",
        "scripted",
        "--script",
        str(files["script"]),
        "-c",
        "none",
        "--out",
        out,
    ]


def commands(files) -> dict[str, list[str]]:
    run = str(hostile_run(files))
    evals = str(files["base"] / "eval")
    return {
        "replay --print": ["replay", run, "--print"],
        "runs list": ["runs", "list"],
        "runs show": ["runs", "show", run],
        "export to standard output": ["export", run],
        "compare --print": ["compare", run, renamed_copy(run), "--print"],
        "eval (progress and report)": eval_command(files, str(files["base"] / f"eval-{time.monotonic_ns()}")),
        "eval --report-only on copied results": ["eval", copied_results(files, evals), "--report-only"],
        "models": ["models", "--models", str(files["models"])],
        "guards": ["guards", "--models", str(files["models"]), "-m", "hostile"],
        "presets": ["presets"],
    }


NAMES = [
    "replay --print",
    "runs list",
    "runs show",
    "export to standard output",
    "compare --print",
    "eval (progress and report)",
    "eval --report-only on copied results",
    "models",
    "guards",
    "presets",
]


@pytest.mark.parametrize("name", NAMES)
def test_no_byte_from_a_file_drives_the_terminal(name, walk_env):
    code, out = on_a_terminal(*commands(walk_env)[name])
    assert code == 0, out[-2000:]
    leaked = [raw for raw in RAW if raw in out]
    assert not leaked, f"{leaked} reached the terminal: {out[-2000:]!r}"
    shown = "␛]0;pwned" in out or "\\x1b]0;pwned" in out  # as a placeholder, or escaped as by repr()
    assert shown, "the hostile field was not shown at all: this case tests nothing"


def test_piped_export_keeps_the_bytes_as_they_are(walk_env):
    done = subprocess.run(
        [sys.executable, "-m", "tuiagent", "export", str(hostile_run(walk_env))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and PAYLOAD in done.stdout
