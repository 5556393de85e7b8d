"""What ``tuiagent calibrate`` asks of a guard: a calibrator, registered under the
``tuiagent.calibrators`` entry point by the guard's own package (``guards/<paper>/calibration.py``).

The host (``calibrate_collect``, ``calibrate``) knows no guard: it runs each question, hands every
executed code block to each calibrator's ``measure`` (stored in the record under the guard's name),
runs the extra held-out runs calibrators ask for, splits the records, and then asks each calibrator
for its fit, its lines of the calibration file and of the report, a learning-curve measure and
whether the guard belongs in the model's ``recommended`` preset. CONTRIBUTING.md walks through one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from tuiagent import plugins
from tuiagent.core.run_spec import RunSpec
from tuiagent.protocol import TokenLP
from tuiagent.training.calibrate_fit import Separation, auroc, balanced_accuracy, bootstrap_auroc, fit_separation

GROUP = "tuiagent.calibrators"
RECORD_VERSION = 2
HELDOUT_EVERY = 5  # [ours] question ids divisible by this are held out from every fit

Record = dict[str, Any]
RESERVED = frozenset({"v", "qid", "question", "gold", "model", "tool", "cot", "wall_s", "engine", "concurrency"})
Ask = Callable[..., Any]  # async ask(question, max_tokens=3): the calibrated model as a judge


def is_heldout(qid: int) -> bool:
    return qid % HELDOUT_EVERY == 0


def heldout_part(qid: int) -> str:
    """Which half of the held-out questions a question id is in [ours]: "validation" (a calibrator
    chooses there, e.g. G-STEP's tau) for every other held-out id (id / HELDOUT_EVERY odd), else
    "test" (only reported)."""
    return "validation" if (qid // HELDOUT_EVERY) % 2 else "test"


@dataclass
class Split:
    train: list[Record]
    heldout: list[Record]
    reused: int = 0  # v1 records among train


def split_records(v2: Sequence[Record], v1: Sequence[Record] = ()) -> Split:
    """Held-out: the v2 records of held-out question ids; train: the other v2 records plus the v1
    records of questions not collected as v2 (they carry no per-block data)."""
    seen = {r["qid"] for r in v2}
    extra = [r for r in v1 if r["qid"] not in seen]
    return Split(
        train=[r for r in v2 if not is_heldout(r["qid"])] + extra,
        heldout=[r for r in v2 if is_heldout(r["qid"])],
        reused=len(extra),
    )


def executed_blocks(records: Sequence[Record]) -> Iterator[tuple[int, Record, Record]]:
    """(question id, record, block entry) for every executed code block of the v2 records."""
    for r in records:
        if r.get("v") != RECORD_VERSION:
            continue
        for b in r["tool"].get("blocks", []):
            if b.get("executed"):
                yield r["qid"], r, b


@dataclass(frozen=True)
class Block:
    """One code block of a collected tool run, as a calibrator's ``measure`` sees it."""

    problem: str
    code: str
    call: int
    turn: int
    turn_text: str  # the whole turn the block closed
    turn_tokens: Sequence[TokenLP]  # its tokens with their logprobs


@dataclass
class HeldoutSeparation:
    """A fitted threshold on the held-out blocks."""

    n: int
    groups: int
    auroc: float
    interval: tuple[float, float]
    action_rate: float
    action_rate_pos: float  # among the blocks where acting is wrong
    action_rate_neg: float
    balanced_accuracy: float


def heldout_separation(
    fit: Separation, scores: np.ndarray, positive: np.ndarray, groups: np.ndarray
) -> HeldoutSeparation:
    oriented = scores if fit.act == "below" else -scores
    acts = fit.acts(scores)
    return HeldoutSeparation(
        n=len(scores),
        groups=len(set(groups.tolist())),
        auroc=auroc(oriented, positive),
        interval=bootstrap_auroc(oriented, positive, groups) if len(scores) else (float("nan"),) * 2,
        action_rate=float(acts.mean()) if len(acts) else float("nan"),
        action_rate_pos=float(acts[positive].mean()) if positive.any() else float("nan"),
        action_rate_neg=float(acts[~positive].mean()) if (~positive).any() else float("nan"),
        balanced_accuracy=balanced_accuracy(acts, positive),
    )


def guard_default(guard: str) -> float:
    """A guard's uncalibrated threshold (its Settings default)."""
    from guards.chain import guard_class

    return float(guard_class(guard).Settings().threshold)


def fmt(v: float | None, digits: int = 3) -> str:
    """A number as the report writes it ("n/a" for none or nan)."""
    return "n/a" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.{digits}f}"


class Calibrator:
    """A guard's part of a calibration. Override what the guard has; the defaults collect, fit and
    report nothing, so a guard with nothing to fit only says whether it is recommended."""

    guard: ClassVar[str]  # the guard's name under ``tuiagent.guards``
    label: ClassVar[str] = ""  # how the report names what it fits (the guard's name when empty)
    order: ClassVar[int] = 100  # its place in the report, the file and the preset (lower first)
    # Extra runs of every held-out question, stored in its record under their name (the compact
    # form, ``records.run_part``), with a line for the report's data section.
    runs: ClassVar[Mapping[str, RunSpec]] = {}
    runs_doc: ClassVar[str] = ""
    # Which training records its learning curve draws from: "collected" (the v2 records, with
    # per-block data) or "all" (reused v1 records too); its columns: (key, header).
    curve_pool: ClassVar[Literal["collected", "all"]] = "collected"
    curve_columns: ClassVar[tuple[tuple[str, str], ...]] = ()

    async def measure(self, block: Block, ask: Ask | None) -> dict[str, Any] | None:
        """What the fit needs of one code block (stored as ``block[guard]``); ``ask``: the model
        it calibrates as a judge, None when the collection asks no judge."""
        return None

    def progress(self, record: Record) -> str:
        """A few words for the collection's line about a finished question ("" for none)."""
        return ""

    def fit(self, split: Split, *, seed: int) -> Any:
        """The fitted values (any object the methods below read), or None: nothing fitted."""
        return None

    def toml(self, fitted: Any, out_dir: Path, meta: Mapping[str, Any]) -> list[str]:
        """The guard's lines of ``<model>.toml`` (a ``[guards.<guard>]`` table); may write files
        the table names into ``out_dir``."""
        return []

    def report(self, fitted: Any) -> list[str]:
        """The guard's section of the report (markdown lines, its heading first)."""
        return []

    def recommend(self, fitted: Any) -> tuple[bool, str]:
        """Whether the guard belongs in the ``recommended`` preset, and why."""
        return False, "no calibration"

    def curve(self, heldout: Sequence[Record], *, seed: int) -> Callable[[list[Record]], dict[str, float]]:
        """A learning-curve measure: held-out metrics (``curve_columns``' keys) of a fit on the given
        training subset ({} when it cannot fit)."""
        return lambda train: {}


def installed() -> list[Calibrator]:
    """Every registered calibrator, in ``order``."""
    found = [plugins.load(GROUP, name, "calibrator")() for name in plugins.names(GROUP)]
    return sorted(found, key=lambda c: (c.order, c.guard))


def heldout_runs(calibrators: Sequence[Calibrator]) -> dict[str, RunSpec]:
    """The extra runs of the held-out questions, by the name their records keep them under; two
    calibrators asking for one name, or a name a record already has, is an error (a plug-in's bug)."""
    runs: dict[str, RunSpec] = {}
    for c in calibrators:
        for name, spec in c.runs.items():
            if name in runs or name in RESERVED:
                raise ValueError(f"the {c.guard} calibrator's run {name!r} is taken: name it after its guard")
            runs[name] = spec
    return runs


@dataclass
class Threshold:
    """A threshold fitted on the training blocks, and how it does on the held-out ones."""

    fit: Separation
    heldout: HeldoutSeparation


def auroc_text(s: Separation | HeldoutSeparation) -> str:
    """ "AUROC 0.513, 95% interval 0.372-0.663", as the calibration file's comments give it."""
    return f"AUROC {fmt(s.auroc)}, 95% interval {fmt(s.interval[0])}-{fmt(s.interval[1])}"


def auroc_rows(t: Threshold) -> list[str]:
    """The report's training and held-out rows of a threshold's AUROC table."""
    return [
        f"| {name} | {fmt(s.auroc)} | {fmt(s.interval[0])} - {fmt(s.interval[1])} |"
        for name, s in (("training", t.fit), ("held-out", t.heldout))
    ]


class ThresholdCalibrator(Calibrator):
    """A guard whose model-specific setting is a ``threshold`` on a per-block score: fitted by
    ``fit_separation`` (``act``: the side of the threshold the guard acts on), measured on the
    held-out blocks, its learning curve the held-out balanced accuracy (``<guard>_bacc``) and the
    share of held-out blocks acted on (``<guard>_acts``)."""

    act: ClassVar[Literal["below", "above"]]

    def score(self, block: Record) -> float | None:
        """The block's score (from what ``measure`` stored), None where it has none."""
        raise NotImplementedError

    def acting_is_wrong(self, record: Record) -> bool:
        """Whether the guard acting on this question's blocks would be the error."""
        raise NotImplementedError

    def data(self, records: Sequence[Record]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(score, acting here would be wrong, question id) per executed block that has a score."""
        rows = [
            (score, self.acting_is_wrong(r), q)
            for q, r, b in executed_blocks(records)
            if (score := self.score(b)) is not None
        ]
        return (
            np.array([x[0] for x in rows], dtype=float),
            np.array([x[1] for x in rows], dtype=bool),
            np.array([x[2] for x in rows], dtype=int),
        )

    def fit(self, split: Split, *, seed: int) -> Threshold | None:
        scores, positive, groups = self.data(split.train)
        if not (positive.any() and (~positive).any()):
            return None
        fit = fit_separation(scores, positive, groups, act=self.act, default=guard_default(self.guard), seed=seed)
        return Threshold(fit, heldout_separation(fit, *self.data(split.heldout)))

    def curve(self, heldout: Sequence[Record], *, seed: int) -> Callable[[list[Record]], dict[str, float]]:
        h_scores, h_positive, _ = self.data(heldout)
        default = guard_default(self.guard)

        def measure(train: list[Record]) -> dict[str, float]:
            scores, positive, groups = self.data(train)
            if not (len(scores) and positive.any() and (~positive).any()):
                return {}
            acts = fit_separation(scores, positive, groups, act=self.act, default=default).acts(h_scores)
            return {
                f"{self.guard}_bacc": balanced_accuracy(acts, h_positive),
                f"{self.guard}_acts": float(np.mean(acts)),
            }

        return measure
