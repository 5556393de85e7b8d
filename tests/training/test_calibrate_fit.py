"""The calibration fits on synthetic data: separation and threshold, no separation, tau by net effect,
and the whole fit writing a calibration file that loads."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from tuiagent.config.calibration import load_calibration
from tuiagent.presets import load_preset_file
from tuiagent.training import calibrate as cal
from tuiagent.training.calibrate_fit import N_BOOT, RARE, auroc, bootstrap_auroc, choose_tau, fit_separation


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


def test_tau_falls_back_to_never_continue_when_continues_do_not_help():
    p = np.array([0.9, 0.7, 0.4, 0.2, 0.1])
    choice = choose_tau(p, np.array([0, -1, 0, 1, -1]), np.full(5, 200.0))
    assert choice.tau is None and choice.net == 0.0
    assert all(row["net"] <= 0 for row in choice.table)


def test_tau_is_chosen_where_continues_help_and_tokens_count():
    p = np.array([0.9, 0.8, 0.3, 0.2])
    delta = np.array([1, 1, 0, -1])  # the gate is confident exactly where a continue fixes the answer
    choice = choose_tau(p, delta, np.full(4, 100.0))
    assert choice.tau == 0.8 and choice.net == pytest.approx(2 - 2 * 100 * 1e-4)
    costly = choose_tau(p, delta, np.full(4, 30_000.0))  # a continue costs more than a right answer is worth
    assert costly.tau is None


def test_fit_all_writes_a_calibration_file_that_loads(tmp_path, synthetic_records):
    res = cal.fit_all(synthetic_records(), model="m")
    assert len(res.split.heldout) == 12 and all(r["qid"] % 5 == 0 for r in res.split.heldout)
    assert res.attc is not None and not res.attc.separated
    assert res.gstep.trained and res.gstep.choice is not None and res.gstep.choice.tau is None  # continues only break
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
    meta = {
        "model": "m",
        "date": "2026-12-01",
        "data": "d.jsonl",
        "questions": "0-59 (60 questions)",
        "train_questions": 48,
        "heldout_questions": 12,
        "command": "tuiagent calibrate m",
    }
    path = cal.write(res, tmp_path, meta, "tuiagent calibrate m")
    loaded = load_calibration(path)
    assert loaded.meta["model"] == "m" and loaded.meta["report"] == "m.md"
    assert loaded.guards["attc"]["threshold"] == pytest.approx(res.attc.threshold, abs=1e-4)
    assert loaded.guards["gstep"] == {"weights": "off"}
    assert "[calibration]" in path.read_text()
    presets = load_preset_file(path)
    assert presets["recommended"].spec.guards == ("necessity", "tim")
    report = (tmp_path / "m.md").read_text()
    assert "No separation" in report and "Learning curve" in report and "never continue" in report


def test_tau_is_chosen_on_validation_questions_and_reported_on_test_ones(tmp_path, synthetic_records):
    """Continues that fix every test question but break a validation one: were the test questions
    part of the choice, a tau would be chosen; it is not, and the test rows show what it missed."""
    records = synthetic_records()
    for r in records:
        if cal.is_heldout(r["qid"]):
            test = cal.tau_part(r["qid"]) == "test"
            r["tool"]["correct"], r["continue"]["correct"] = (False, True) if test else (True, r["qid"] != 5)
    assert [cal.tau_part(q) for q in (0, 5, 10, 15)] == ["test", "validation", "test", "validation"]
    res = cal.fit_all(records, model="m", curve=False)
    g = res.gstep
    assert (g.validation_samples, g.test_samples) == (6, 6)
    assert g.choice is not None and g.choice.tau is None  # the validation questions: continues only break
    assert all(row["continues"] <= 6 for row in g.choice.table)  # chosen over the 6 validation questions only
    assert g.validation["always"]["broken"] == 1 and g.test["always"]["fixed"] == 6 and "chosen" not in g.test
    assert "gstep" not in res.recommended
    meta = {
        "model": "m",
        "date": "2026-12-01",
        "data": "d.jsonl",
        "questions": "0-59 (60 questions)",
        "train_questions": 48,
        "heldout_questions": 12,
        "command": "tuiagent calibrate m",
    }
    cal.write(res, tmp_path, meta, "tuiagent calibrate m")
    report = (tmp_path / "m.md").read_text()
    assert "**validation** (6 samples" in report and "**test** (6 samples" in report
    assert "| test | 0 (always) | 6 | 6 | 0 |" in report and "6 validation, where G-STEP's tau is chosen" in report
