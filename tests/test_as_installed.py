"""The project as a user runs it, not as pytest does.

pytest puts the repository root on ``sys.path``, and the sandbox shows the kernel every directory on
``sys.path``: so in every other test the kernel can import the project whatever the sandbox binds.
Here a copy of this checkout is installed the way ``make`` installs it (editable, so an import finder
maps the project's packages to the copy, which is on no path) into a venv of its own, in a place the
sandbox hides: a home directory (HOME under /tmp, reached through a symlink) and /tmp. Its console
script runs with the environment's own ``sys.path``: solve with the real kernel at the default
sandbox level, the app (Pilot) on one scripted problem, doctor; and a kernel that cannot start.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from kernels import sandbox

REPO = Path(__file__).resolve().parents[1]
SCRIPT = [
    {"text": "Let me compute.\n```python\nprint(6 * 7)\n```", "logprob": -0.01},
    {"text": "So the answer is \\boxed{42}.", "logprob": -0.01},
]
MODELS = 'default = "scripted"\n[models.scripted]\nbackend = "scripted"\n[models.scripted.source]\nkind = "script"\npath = ""\n'
# A kernel that cannot start: an ipykernel_launcher that fails the way a broken install does.
BROKEN_LAUNCHER = "import sys\nsys.stderr.write('broken-launcher: cannot go on\\n')\nimport not_a_real_module_xyz\n"
LEVEL = sandbox.resolve("auto")


@dataclass(frozen=True)
class Installed:
    home: Path  # HOME for the commands
    clone: Path  # the copy, as the user names it
    venv: Path
    install_printed: str  # what the editable install printed

    def run(self, *args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
        """The installed console script ``tuiagent args``, from the clone, as the user runs it."""
        return self.command(str(self.venv / "bin" / "tuiagent"), *args, env=env, timeout=timeout)

    def python(self, code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """The venv's Python on ``code``; -P: no working directory on sys.path, as for a console script."""
        return self.command(str(self.venv / "bin" / "python"), "-P", "-c", code, *args, env=env)

    def command(
        self, *argv: str, env: dict[str, str] | None = None, timeout: float = 240
    ) -> subprocess.CompletedProcess:
        full = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHON"))}
        full.update(HOME=str(self.home), **(env or {}))
        return subprocess.run(argv, cwd=self.clone, env=full, capture_output=True, text=True, timeout=timeout)


def _copy_checkout(target: Path) -> None:
    """The checkout's files as a fresh clone has them (tracked and new files; no venv, no caches)."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True, text=True
    )
    if listed.returncode == 0:
        for name in filter(None, listed.stdout.split("\0")):
            source = REPO / name
            if source.is_file():
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target / name)
    else:  # no git: the tree less what is built or cached
        shutil.copytree(REPO, target, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info"))


def _install(clone: Path, named: Path) -> tuple[Path, str]:
    """A venv in ``clone`` with the project installed editable from ``named`` (the path the user gives).

    The venv reaches this environment's dependencies through a .pth line (installing them again
    would take minutes and the network); its own site-packages holds only the project's editable
    finder, as a ``pip install -e`` leaves it. A .pth line adds a directory without running the
    .pth files in it, so this environment's own editable finder (for the repository) stays out.
    """
    venv = clone / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    inner = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (inner / "_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    done = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "-e",
            str(named),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **makefile_install_env()},
    )
    return venv, done.stdout + done.stderr


def makefile_install_env() -> dict[str, str]:
    """The variables the Makefile's editable install (its EDITABLE line) runs under."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    found = re.search(r"^EDITABLE := (.*?)\$\(BIN\)/pip", makefile, re.MULTILINE)
    assert found, "the Makefile's EDITABLE line"
    return dict(word.split("=", 1) for word in shlex.split(found.group(1)))


@pytest.fixture(scope="module", params=["home, through a symlink", "tmp"])
def installed(request, tmp_path_factory) -> Installed:
    base = tmp_path_factory.mktemp("clone")  # under /tmp
    home = base / "home"
    if request.param == "tmp":
        clone = named = base / "tuiagent"  # HOME stays the user's own; the clone is under /tmp
        clone.mkdir(parents=True)
        home = Path.home()
    else:
        clone = base / "disk" / "tuiagent"
        clone.mkdir(parents=True)
        (home / "src").mkdir(parents=True)
        named = home / "src" / "tuiagent"
        named.symlink_to(clone)
    _copy_checkout(clone)
    venv, printed = _install(clone, named)
    return Installed(home, named, named / ".venv" if named != clone else venv, printed)


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "script.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in SCRIPT), encoding="utf-8")
    return path


@pytest.fixture
def data_dirs(tmp_path) -> dict[str, str]:
    return {"TUIAGENT_CONFIG_DIR": str(tmp_path / "config"), "TUIAGENT_DATA_DIR": str(tmp_path / "data")}


@pytest.fixture
def broken_kernel(tmp_path) -> dict[str, str]:
    """The environment of a machine whose kernel cannot start."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "ipykernel_launcher.py").write_text(BROKEN_LAUNCHER, encoding="utf-8")
    return {"PYTHONPATH": str(shadow)}


def ours_crashed(done: subprocess.CompletedProcess) -> bool:
    """Whether tuiagent itself ended in a traceback (the kernel's own, quoted indented in the message, is fine)."""
    return any(line.startswith("Traceback") for line in (done.stdout + done.stderr).splitlines())


def events_of(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_the_project_is_imported_from_the_copy_and_not_from_a_path(installed):
    done = installed.python("import json, sys, kernels; print(kernels.__file__); print(json.dumps(sys.path))")
    where, path = done.stdout.splitlines()
    assert Path(where).resolve().is_relative_to(installed.clone.resolve()), where
    assert not {str(installed.clone), str(installed.clone.resolve())} & set(json.loads(path))  # the user's sys.path


def test_the_install_prints_nothing(installed):
    """`make run`'s first lines are tuiagent's own: setuptools' editable-install notice is not shown
    (issue 39 item 12), and nothing else either."""
    assert installed.install_printed.strip() == ""


def test_the_install_notice_is_there_to_hide(tmp_path):
    """Without the Makefile's variables the same install prints setuptools' notice (so the test above can fail)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    code = "import setuptools.build_meta as b, sys; b.build_editable(sys.argv[1])"
    for extra, shown in (({}, True), (makefile_install_env(), False)):
        done = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)], cwd=REPO, env={**env, **extra}, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        assert ("Editable installation" in done.stderr) is shown, done.stderr


def test_solve_runs_the_code_in_the_kernel_at_the_default_level(installed, script, data_dirs, tmp_path):
    done = installed.run(
        "solve",
        "What is 6 times 7?",
        "-m",
        "scripted",
        "--script",
        str(script),
        "--json",
        "--out",
        str(tmp_path / "runs"),
        env=data_dirs,
    )
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    events = events_of(done.stdout)
    notice = next(e["message"] for e in events if e["type"] == "Notice")
    assert notice.startswith(f"kernel sandbox: {LEVEL}"), notice
    result = next(e for e in events if e["type"] == "ToolResult")
    assert (result["error"], result["shown"].strip()) == (False, "42"), result
    assert events[-1]["reason"] == "answer" and events[-1]["answer"] == "42"


def test_doctor_says_all_good(installed, tmp_path, data_dirs):
    models = tmp_path / "models.toml"
    models.write_text(MODELS, encoding="utf-8")
    done = installed.run("doctor", "--models", str(models), env=data_dirs)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "ok    kernel start" in done.stdout and f"auto is {LEVEL} (" in done.stdout
    assert (
        f"the project from {installed.clone.resolve()}" in done.stdout
        or f"the project from {installed.clone}" in done.stdout
    )


APP_RUN = textwrap.dedent("""
    import asyncio, json, sys
    from pathlib import Path
    from tuiagent.core.run_spec import RunSpec
    from tuiagent.ui import AppConfig, make_app
    from tuiagent.ui.widgets.status_line import StatusLine

    async def main():
        app = make_app(AppConfig(model="scripted", script=Path(sys.argv[1]), problem="What is 6 times 7?",
                                 run_spec=RunSpec(guards=()),
                                 out=Path(sys.argv[2])))
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(3000):  # until the model is ready, then until the run has ended
                if app.session.state == "ready":
                    break
                await pilot.pause(0.02)
            await pilot.press("ctrl+r")
            for _ in range(6000):
                if app.screen.finished is not None:
                    break
                await pilot.pause(0.02)
            finished = app.screen.finished
            print(json.dumps({"reason": finished and finished.reason, "answer": finished and finished.answer,
                              "status": app.screen.query_one(StatusLine).state,
                              "notices": [n.message for n in app._notifications]}))

    asyncio.run(main())
""")


def run_app(installed: Installed, script: Path, out: Path, env: dict[str, str]) -> dict:
    done = installed.python(APP_RUN, str(script), str(out), env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_app_solves_a_problem_with_the_kernel(installed, script, data_dirs, tmp_path):
    shown = run_app(installed, script, tmp_path / "runs", data_dirs)
    assert (shown["reason"], shown["answer"]) == ("answer", "42"), shown
    recorded = [json.loads(line) for line in next((tmp_path / "runs").glob("*.jsonl")).read_text().splitlines()]
    assert next(e["message"] for e in recorded if e.get("type") == "Notice").startswith(f"kernel sandbox: {LEVEL}")
    assert next(e["shown"] for e in recorded if e.get("type") == "ToolResult").strip() == "42"


def test_a_kernel_that_cannot_start_says_why_everywhere(installed, script, data_dirs, broken_kernel, tmp_path):
    env = {**data_dirs, **broken_kernel}
    said = (
        "the kernel could not start",
        "broken-launcher: cannot go on",
        "likely cause: not_a_real_module_xyz",
        "fix: ",
    )

    solve = installed.run(
        "solve",
        "What is 6 times 7?",
        "-m",
        "scripted",
        "--script",
        str(script),
        "--out",
        str(tmp_path / "solve"),
        env=env,
    )
    assert solve.returncode == 1, solve.stdout + solve.stderr
    for words in said:
        assert words in solve.stdout, (words, solve.stdout)
    assert not ours_crashed(solve)
    assert "ended: kernel_failed" in solve.stdout
    recorded = [json.loads(line) for line in next((tmp_path / "solve").glob("*.jsonl")).read_text().splitlines()]
    assert recorded[-1]["type"] == "RunFinished" and recorded[-1]["reason"] == "kernel_failed"

    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "p1", "question": "What is 6 times 7?", "answer": "42"}) + "\n")
    evaluated = installed.run(
        "eval",
        str(problems),
        "-m",
        "scripted",
        "--script",
        str(script),
        "-c",
        "none",
        "--out",
        str(tmp_path / "eval"),
        "--quiet",
        env=env,
    )
    assert evaluated.returncode != 0, evaluated.stderr
    for words in said:
        assert words in evaluated.stderr, (words, evaluated.stderr)
    assert not ours_crashed(evaluated)
    assert "retried" in evaluated.stderr
    assert (
        not (tmp_path / "eval" / "results.jsonl").exists()
        or '"p1"' not in (tmp_path / "eval" / "results.jsonl").read_text()
    )

    models = tmp_path / "models.toml"
    models.write_text(MODELS, encoding="utf-8")
    doctor = installed.run("doctor", "--models", str(models), env=env)
    assert doctor.returncode == 1
    line = next(line for line in doctor.stdout.splitlines() if "kernel start" in line)
    assert "fail" in line and "likely cause: not_a_real_module_xyz is not installed" in line, line

    shown = run_app(installed, script, tmp_path / "app", env)
    assert shown["reason"] == shown["status"] == "kernel_failed", shown
    assert any(all(words in n for words in said) for n in shown["notices"]), shown["notices"]
