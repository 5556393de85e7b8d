"""The calibration fits on synthetic data: separation and threshold, no separation, and the whole fit
(every installed calibrator) writing a calibration file that loads. G-STEP's tau: guards/gstep/tests."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from tests.training.conftest import META, synthetic
from tuiagent.config.calibration import load_calibration
from tuiagent.core.run_spec import RunSpec
from tuiagent.presets import load_preset_file
from tuiagent.training import calibrate as cal
from tuiagent.training.calibrate_fit import N_BOOT, RARE, auroc, bootstrap_auroc, fit_separation
from tuiagent.training.calibrators import Calibrator, executed_blocks


def test_auroc_counts_ties_as_half():
    assert auroc([0.1, 0.2, 0.8, 0.9], [False, False, True, True]) == 1.0
    assert auroc([0.5, 0.5], [False, True]) == 0.5
    assert auroc([0.9, 0.1], [False, True]) == 0.0
    assert np.isnan(auroc([0.1, 0.2], [True, True]))


def test_auroc_is_the_mann_whitney_u_and_sklearns_roc_auc():
    from sklearn.metrics import roc_auc_score

    scores = np.array([0.2, 0.5, 0.5, 0.7, 0.1, 0.9, 0.5, 0.3, 0.8, 0.8])  # ties within and across classes
    positive = np.array([False, True, False, True, False, True, True, False, False, True])
    u = scipy.stats.mannwhitneyu(scores[positive], scores[~positive]).statistic
    assert auroc(scores, positive) == pytest.approx(u / (5 * 5), abs=1e-12)
    assert auroc(scores, positive) == pytest.approx(roc_auc_score(positive, scores), abs=1e-12)


@pytest.mark.parametrize("tied", [False, True], ids=["distinct", "tied scores, uneven questions"])
def test_auroc_interval_resamples_questions_through_scipy(tied):
    rng = np.random.default_rng(4)
    groups = np.repeat(np.arange(14), 2)  # two blocks per question, one label per question
    if tied:
        groups = np.sort(rng.integers(0, 14, 28))  # one to several blocks a question
        groups = np.searchsorted(np.unique(groups), groups)
    n = groups.max() + 1
    positive = (rng.random(n) < 0.5)[groups]
    scores = rng.random(28) + 0.3 * positive
    if tied:
        scores = np.round(scores, 1)  # many ties: each counts one half
    low, high = bootstrap_auroc(scores, positive, groups)
    members = [np.flatnonzero(groups == q) for q in range(n)]
    values = []
    for draw in np.random.default_rng(0).integers(0, n, (N_BOOT, n)):  # by hand: whole questions
        idx = np.concatenate([members[k] for k in draw])
        values.append(auroc(scores[idx], positive[idx]))
    kept = np.array(values)[~np.isnan(values)]  # one-class resamples left out
    assert 0 < kept.size < N_BOOT
    assert (low, high) == pytest.approx(tuple(np.quantile(kept, [0.025, 0.975])), abs=1e-12)
    assert bootstrap_auroc(scores, positive, groups) == (low, high)  # seeded


def test_separable_blocks_give_auroc_near_one_and_a_threshold_between_the_groups():
    rng = np.random.default_rng(1)
    right = rng.uniform(0.96, 0.99, 60)  # blocks of right runs: confident
    wrong = rng.uniform(0.80, 0.90, 60)
    scores = np.concatenate([right, wrong])
    positive = np.array([True] * 60 + [False] * 60)
    groups = np.arange(120) // 2  # two blocks per question
    fit = fit_separation(scores, positive, groups, act="below")
    assert fit.separated and fit.auroc > 0.99 and fit.interval[0] > 0.9
    assert wrong.max() < fit.threshold <= right.min()
    assert fit.acts(wrong).all() and not fit.acts(right).any()
    few = fit_separation(scores[::12], positive[::12], groups[::12], act="below")  # 5 questions a side
    assert few.auroc == 1.0 and not few.separated  # too few questions to call it


def test_inseparable_blocks_say_no_separation_and_rarely_act():
    scores = np.linspace(0.85, 0.99, 200)
    positive = np.arange(200) % 2 == 0  # right and wrong runs interleaved over the whole range
    for act in ("below", "above"):
        fit = fit_separation(scores, positive, np.arange(200), act=act)
        assert not fit.separated and fit.interval[0] <= 0.5 <= fit.interval[1]
        assert 0 < fit.action_rate <= RARE + 0.01


def test_a_score_that_separates_the_wrong_way_is_no_separation():
    scores = np.array([0.8, 0.82, 0.84, 0.97, 0.98, 0.99] * 5)
    positive = np.array([True, True, True, False, False, False] * 5)  # right runs less confident
    fit = fit_separation(scores, positive, np.arange(30), act="below")
    assert fit.auroc == 0.0 and not fit.separated and fit.action_rate <= RARE + 0.05


def test_fit_all_writes_a_calibration_file_that_loads(tmp_path, synthetic_records):
    res = cal.fit_all(synthetic_records(), model="m")
    assert len(res.split.heldout) == 12 and all(r["qid"] % 5 == 0 for r in res.split.heldout)
    attc, gstep = res.fits["attc"], res.fits["gstep"]
    assert attc is not None and not attc.fit.separated
    assert gstep.trained and gstep.choice is not None and gstep.choice.tau is None  # continues only break
    assert res.recommended == ["necessity", "tim"]
    assert [(r["pool"], r["train_questions"]) for r in res.curve] == [
        ("collected", 10),
        ("collected", 20),
        ("collected", 40),
        ("collected", 48),
        ("all", 10),
        ("all", 20),
        ("all", 40),
        ("all", 48),
    ]
    assert 0 <= res.curve[3]["attc_bacc"] <= 1 and 0 <= res.curve[-1]["gate_auroc"] <= 1
    path = cal.write(res, tmp_path, META, "tuiagent calibrate m")
    loaded = load_calibration(path)
    assert loaded.meta["model"] == "m" and loaded.meta["report"] == "m.md"
    assert loaded.guards["attc"]["threshold"] == pytest.approx(attc.fit.threshold, abs=1e-4)
    assert loaded.guards["gstep"] == {"weights": "off"}
    assert "[calibration]" in path.read_text()
    presets = load_preset_file(path)
    assert presets["recommended"].spec.guards == ("necessity", "tim")
    report = (tmp_path / "m.md").read_text()
    assert "No separation" in report and "Learning curve" in report and "never continue" in report


def test_the_shipped_guards_each_register_a_calibrator():
    from tuiagent.training.calibrators import installed

    assert [c.guard for c in installed()] == ["attc", "necessity", "gstep", "tim", "prunetir"]


class Parity(Calibrator):
    """A calibrator of a test's own, known to the host only as a Calibrator: it measures whether each
    block's code is even-length, fits the share of even blocks, and asks for one extra held-out run."""

    guard = "parity"
    runs = {"again": RunSpec(guards=(), run={"mode": "tool"})}
    runs_doc = "the tool run again"
    curve_columns = (("parity_share", "share of even blocks"),)

    async def measure(self, block, ask):
        return {"even": len(block.code) % 2 == 0}

    def fit(self, split, *, seed):
        evens = [b["parity"]["even"] for _, _, b in executed_blocks(split.train) if "parity" in b]
        return sum(evens) / len(evens) if evens else None

    def toml(self, fitted, out_dir, meta):
        (out_dir / "parity.txt").write_text(f"{fitted}\n")
        return ["[guards.parity]", f"share = {fitted}  # [calibration]", ""]

    def report(self, fitted):
        return ["## Parity", "", f"share {fitted}", ""]

    def recommend(self, fitted):
        return fitted is not None and fitted > 0.5, "more even than odd"

    def curve(self, heldout, *, seed):
        return lambda train: {"parity_share": float(len(train))}


def test_the_host_asks_a_calibrator_for_everything_it_writes(tmp_path):
    records = synthetic(n=20)
    for r in records:
        for b in r["tool"]["blocks"]:
            b["parity"] = {"even": b["call"] == 1}
    res = cal.fit_all(records, model="m", calibrators=[Parity()])
    assert res.fits == {"parity": pytest.approx(16 / 24)} and res.recommended == ["parity"]
    assert [r["parity_share"] for r in res.curve] == [10.0, 16.0]  # the subsets' sizes: the curve drew them
    meta = {"model": "m", "date": "2026-12-07", "data": "d", "questions": "0-19", "command": "c"}
    path = cal.write(res, tmp_path, meta, "c")
    assert load_calibration(path).guards == {"parity": {"share": pytest.approx(16 / 24)}}
    assert (tmp_path / "parity.txt").read_text().startswith("0.66")
    report = (tmp_path / "m.md").read_text()
    assert "## Parity" in report and "- parity: more even than odd" in report and "again: the tool run again" in report
    assert "| training questions | share of even blocks |" in report and "ATTC" not in report


def test_two_calibrators_cannot_ask_for_one_run_name():
    from tuiagent.training.calibrators import heldout_runs

    class Again(Parity):
        guard = "again"

    assert list(heldout_runs([Parity()])) == ["again"]
    with pytest.raises(ValueError, match="the again calibrator's run 'again' is taken"):
        heldout_runs([Parity(), Again()])

    class Tool(Parity):
        guard = "tool-twice"
        runs = {"tool": RunSpec()}

    with pytest.raises(ValueError, match="run 'tool' is taken"):
        heldout_runs([Tool()])
