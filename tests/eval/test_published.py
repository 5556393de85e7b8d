"""The measured evals live out of the source tree (the branch `results`, or main's history) and come
back with `tuiagent results fetch`, their reports equal to the ones kept beside the docs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuiagent.cli import app
from tuiagent.errors import UserError
from tuiagent.eval import published as pub

SMALL = "gsm30-qwen1.5b"  # results only, no trajectories: the quickest to copy
KEPT = ("summary.md", "summary.json", "summary.csv", "eval.json")


def _full_history(repo: Path) -> None:
    shallow = subprocess.run(["git", "-C", str(repo), "rev-parse", "--is-shallow-repository"], capture_output=True)
    if shallow.returncode != 0 or shallow.stdout.strip() != b"false":
        pytest.skip(f"{repo} is not a full git clone")


def _same_report(fetched: Path, name: str) -> None:
    for kept in KEPT:
        assert (fetched / kept).read_bytes() == (pub.REPORTS / name / kept).read_bytes(), kept
    assert (fetched / "results.jsonl").stat().st_size > 0


def test_a_measured_eval_is_fetched_with_the_report_the_docs_keep(tmp_path):
    _full_history(pub.CHECKOUT)
    assert SMALL in pub.published() and "tim-gsm40" in pub.published()
    result = CliRunner().invoke(app, ["results", "fetch", SMALL, "--to", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"fetched {tmp_path / SMALL}" in result.output
    _same_report(tmp_path / SMALL, SMALL)
    (tmp_path / SMALL / "results.jsonl").write_text("mine\n")
    again = CliRunner().invoke(app, ["results", "fetch", SMALL, "--to", str(tmp_path)])
    assert again.exit_code == 0 and "already there" in again.output
    assert (tmp_path / SMALL / "results.jsonl").read_text() == "mine\n"  # left as it was
    listed = CliRunner().invoke(app, ["results", "list", "--to", str(tmp_path)])
    assert any(line.split()[:2] == [SMALL, "fetched"] for line in listed.output.splitlines())
    alone = CliRunner().invoke(app, ["results"])  # without a command: the list
    assert alone.exit_code == 0 and SMALL in alone.output


def test_a_clone_without_the_branch_reads_mains_history(tmp_path):
    _full_history(pub.CHECKOUT)
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "--quiet", "--single-branch", "--no-checkout", str(pub.CHECKOUT), str(clone)], check=True
    )
    has_branch = subprocess.run(["git", "-C", str(clone), "rev-parse", "--verify", "--quiet", "refs/heads/results"])
    if has_branch.returncode == 0:  # main's own branch was `results`: not this checkout
        pytest.skip("the clone took the results branch")
    where = pub.source(clone, remote="no-such-remote")
    assert where.tree.startswith(pub.HISTORY[0])
    source, copied = pub.fetch([SMALL], tmp_path / "evals", clone)
    assert copied == [SMALL] and source == where
    _same_report(tmp_path / "evals" / SMALL, SMALL)


def test_no_checkout_no_git_and_an_unknown_name_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="not a git checkout"):
        pub.source(tmp_path)
    with monkeypatch.context() as m:
        m.setenv("PATH", str(tmp_path))  # no git on it
        with pytest.raises(UserError, match="git, which is not installed"):
            pub.source(pub.CHECKOUT)
    with pytest.raises(UserError, match=f"no measured eval named nosuch; they are: .*{SMALL}"):
        pub.fetch(["nosuch"], tmp_path)
    assert not list(tmp_path.iterdir())


def test_reporting_a_measured_eval_not_fetched_says_how_to_fetch_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["eval", "evals/tim-gsm40", "--report-only"])
    assert isinstance(result.exception, UserError)
    assert "`tuiagent results fetch tim-gsm40`" in str(result.exception)
    assert not (tmp_path / "evals").exists()
