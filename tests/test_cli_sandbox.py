"""`--sandbox` and `--confirm` on the command line: real processes, a real kernel, a real terminal."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
import uuid

import pytest

SUBPROCESS_CELL = "Run it.\n```python\nimport subprocess\nprint(subprocess.run(['echo', 'hi'], capture_output=True, text=True).stdout)\n```\n```output"


def solve(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuiagent", "solve", *args], capture_output=True, text=True, timeout=120, **kw
    )


@pytest.mark.parametrize(("level", "shown"), [("auto", "tuiagent sandbox: starting"), ("off", "hi")])
def test_the_sandbox_level_decides_what_a_cell_may_do(write_script, tmp_path, level, shown):
    script = write_script(SUBPROCESS_CELL, "\\boxed{1}")
    out = solve("p", "-m", "scripted", "--script", str(script), "--json", "--sandbox", level, "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    tool = next(json.loads(line) for line in out.stdout.splitlines() if '"ToolResult"' in line)
    assert shown in tool["shown"]


def test_confirm_without_a_terminal_is_a_clear_error(write_script, tmp_path):
    script = write_script(SUBPROCESS_CELL, "\\boxed{1}")
    out = solve(
        "p", "-m", "scripted", "--script", str(script), "--confirm", "--out", str(tmp_path), start_new_session=True
    )  # no controlling terminal
    assert out.returncode == 2 and "needs a terminal" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_confirm_asks_in_the_terminal_and_runs_only_approved_blocks(write_script, tmp_path):
    cell = "Step.\n```python\nprint('ran', {n})\n```\n```output"
    script = write_script(cell.format(n=1), cell.format(n=2), "\\boxed{2}")
    log = tmp_path / "out.jsonl"
    session = f"tuiagent-confirm-{uuid.uuid4().hex[:6]}"
    command = (
        f"{shlex.quote(sys.executable)} -m tuiagent solve p -m scripted --script {shlex.quote(str(script))} "
        f"--json --confirm --out {shlex.quote(str(tmp_path))} > {shlex.quote(str(log))}"
    )

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30).stdout

    def wait_for_questions(count: int) -> None:
        deadline = time.monotonic() + 60
        while tmux("capture-pane", "-p", "-t", session).count("Run this code block?") < count:
            assert time.monotonic() < deadline, tmux("capture-pane", "-p", "-t", session)
            time.sleep(0.2)

    tmux("new-session", "-d", "-s", session, "-x", "100", "-y", "20", command + "; sleep 30")
    try:
        wait_for_questions(1)
        tmux("send-keys", "-t", session, "n", "Enter")
        wait_for_questions(2)
        tmux("send-keys", "-t", session, "y", "Enter")
        deadline = time.monotonic() + 60
        while '"RunFinished"' not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, log.read_text() if log.exists() else "no output"
            time.sleep(0.2)
    finally:
        tmux("kill-session", "-t", session)
    results = [json.loads(line) for line in log.read_text().splitlines() if '"ToolResult"' in line]
    assert [r["executed"] for r in results] == [False, True]
    assert "chose not to run" in results[0]["shown"] and results[1]["shown"] == "ran 2"


def test_the_network_is_refused_unless_a_setting_allows_it(write_script, tmp_path):
    """A cell connects to a TCP server of the test on the host: refused by default, allowed with
    --allow-network (and the run's sandbox notice says so)."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    threading.Thread(target=lambda: [server.accept()[0].close() for _ in range(2)], daemon=True).start()
    cell = (
        "Connect.\n```python\nimport socket\ntry:\n    socket.create_connection(('127.0.0.1', %d), timeout=5)"
        "\n    print('connected')\nexcept OSError as e:\n    print('refused', type(e).__name__)\n```\n```output"
    ) % port
    script = write_script(cell, "\\boxed{1}")
    shown = {}
    for flag in ((), ("--allow-network",)):
        out = solve(
            "p", "-m", "scripted", "--script", str(script), "--json", "--preset", "none", *flag, "--out", str(tmp_path)
        )
        assert out.returncode == 0, out.stderr
        events = [json.loads(line) for line in out.stdout.splitlines()]
        tool = next(e for e in events if e["type"] == "ToolResult")
        notice = next(e["message"] for e in events if e["type"] == "Notice" and "kernel sandbox" in e["message"])
        shown[flag] = (tool["shown"], notice)
    assert shown[()][0].startswith("refused") and "network allowed" not in shown[()][1]
    assert shown[("--allow-network",)][0] == "connected" and "network allowed" in shown[("--allow-network",)][1]
    server.close()
