"""G-STEP's calibrator (guards/gstep/calibration.py) on synthetic records: tau by the net effect of a
continue, chosen on the validation held-out questions and only reported on the test ones."""

from __future__ import annotations

import numpy as np
import pytest

from guards.gstep.calibration import choose_tau
from tests.training.conftest import META, synthetic
from tuiagent.training import calibrate as cal
from tuiagent.training.calibrators import heldout_part, is_heldout


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


def test_tau_is_chosen_on_validation_questions_and_reported_on_test_ones(tmp_path):
    """Continues that fix every test question but break a validation one: were the test questions
    part of the choice, a tau would be chosen; it is not, and the test rows show what it missed."""
    records = synthetic()
    for r in records:
        if is_heldout(r["qid"]):
            test = heldout_part(r["qid"]) == "test"
            r["tool"]["correct"], r["continue"]["correct"] = (False, True) if test else (True, r["qid"] != 5)
    assert [heldout_part(q) for q in (0, 5, 10, 15)] == ["test", "validation", "test", "validation"]
    res = cal.fit_all(records, model="m", curve=False)
    g = res.fits["gstep"]
    assert (g.validation_samples, g.test_samples) == (6, 6)
    assert g.choice is not None and g.choice.tau is None  # the validation questions: continues only break
    assert all(row["continues"] <= 6 for row in g.choice.table)  # chosen over the 6 validation questions only
    assert g.validation["always"]["broken"] == 1 and g.test["always"]["fixed"] == 6 and "chosen" not in g.test
    assert "gstep" not in res.recommended
    cal.write(res, tmp_path, META, "tuiagent calibrate m")
    report = (tmp_path / "m.md").read_text()
    assert "**validation** (6 samples" in report and "**test** (6 samples" in report
    assert (
        "| test | 0 (always) | 6 | 6 | 0 |" in report and "6 validation, where a calibrator makes its choices" in report
    )


def test_a_gate_that_helps_is_written_beside_the_file_and_loads_from_anywhere(tmp_path, monkeypatch):
    """Continues that fix every held-out question: a tau is chosen, G-STEP is recommended, and the
    file names its gate "./<model>-gstep.npz", which the loader resolves next to the file."""
    from guards.gstep.guard import Gate
    from tuiagent.config.calibration import load_calibration

    records = synthetic()
    for r in records:
        if is_heldout(r["qid"]):
            r["tool"]["correct"], r["continue"]["correct"] = False, True
    res = cal.fit_all(records, model="m", curve=False)
    assert res.fits["gstep"].choice.tau is not None and "gstep" in res.recommended
    path = cal.write(res, tmp_path / "cal", META, "c")
    assert 'weights = "./m-gstep.npz"' in path.read_text()
    monkeypatch.chdir(tmp_path)  # not the file's directory
    weights = load_calibration("cal/m.toml").guards["gstep"]["weights"]
    assert weights == str(tmp_path / "cal" / "m-gstep.npz")
    assert Gate.from_file(weights).meta["model"] == "m"
