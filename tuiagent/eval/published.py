"""The project's measured evals: the result directories its docs cite, kept out of the source tree.

Each directory whole (records, generations, judgements, trajectories) is on the git branch
``results``, which shares no history with ``main``; ``main`` keeps each one's report (summary.md,
summary.json, summary.csv, eval.json, plots) under ``docs/results/<name>/``. ``fetch`` copies
directories into ``evals/`` from that branch, else from its copy on the remote, else from ``main``'s
own history (the last commit that still had them in its tree): all offline but a fetch from the remote,
which is tried last."""

from __future__ import annotations

import io
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from tuiagent.errors import UserError

BRANCH = "results"
# main's last commit with the directories in its tree (under evals/): a full clone has it whatever
# became of the branch.
HISTORY = "788f02d9262ac5be1f0e9247f0e0088b17adb47c", "evals"
CHECKOUT = Path(__file__).resolve().parents[2]  # the work tree of an editable install (make run, make test)
REPORTS = CHECKOUT / "docs" / "results"
MANIFEST = "eval.json"


@dataclass(frozen=True)
class Source:
    """Where the directories are read from: ``tree`` (a git tree-ish holding one folder per eval)."""

    tree: str
    described: str


def published(reports: Path = REPORTS) -> list[str]:
    """The measured evals' names: those whose report is kept beside the docs."""
    return sorted(p.parent.name for p in reports.glob(f"*/{MANIFEST}"))


def _git(repo: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise UserError("the measured evals are read with git, which is not installed here") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"git {args[0]} took over {timeout:g} s in {repo}") from None


def _has_tree(repo: Path, tree: str) -> bool:
    found = _git(repo, "cat-file", "-t", tree)
    return found.returncode == 0 and found.stdout.strip() == b"tree"


def source(repo: Path = CHECKOUT, *, remote: str = "origin") -> Source:
    """The first place that has the directories: the branch, its remote copy, main's history, and last
    the remote itself (``git fetch``). UserError, saying what was tried, when none has them."""
    if not (repo / ".git").exists():
        raise UserError(
            f"the measured evals live in tuiagent's git repository (branch {BRANCH!r}), and {repo} is not a git "
            "checkout (an installed package): clone the repository and run this from the clone"
        )
    commit, folder = HISTORY
    candidates = [
        Source(f"{BRANCH}:", f"the branch {BRANCH!r}"),
        Source(f"{remote}/{BRANCH}:", f"the branch {remote}/{BRANCH}"),
        Source(f"{commit}:{folder}", f"main's history ({folder}/ at {commit})"),
    ]
    for candidate in candidates:
        if _has_tree(repo, candidate.tree):
            return candidate
    fetched = _git(repo, "fetch", "--quiet", remote, f"{BRANCH}:{BRANCH}", timeout=600)
    if fetched.returncode == 0 and _has_tree(repo, candidates[0].tree):
        return candidates[0]
    why = fetched.stderr.decode(errors="replace").strip().splitlines()
    raise UserError(
        f"{repo} has neither the branch {BRANCH!r} nor the commit {commit} (a shallow or single-branch clone?), "
        f"and `git fetch {remote} {BRANCH}` failed{': ' + why[-1] if why else ''}"
    )


def fetch(names: list[str], to: Path, repo: Path = CHECKOUT, *, reports: Path = REPORTS) -> tuple[Source, list[str]]:
    """Copy the named directories (all when ``names`` is empty) into ``to``; one already there is left as
    it is. Returns where they came from and the names copied."""
    known = published(reports)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UserError(f"no measured eval named {', '.join(unknown)}; they are: {', '.join(known)}")
    wanted = [n for n in (names or known) if not (to / n).exists()]
    where = source(repo)
    if not wanted:
        return where, []
    archive = _git(repo, "archive", "--format=tar", where.tree, *wanted, timeout=600)
    if archive.returncode != 0:
        raise UserError(
            f"git could not read {', '.join(wanted)} from {where.described}: {archive.stderr.decode().strip()}"
        )
    to.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later: no links out, no odd modes
            tar.extractall(to, filter="data")
        else:  # our own repository's archive
            tar.extractall(to)  # noqa: S202
    return where, wanted
