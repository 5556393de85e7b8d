"""PruneTIR's part of ``tuiagent calibrate`` (``tuiagent.training.calibrators``): nothing fitted, a
recommendation only (the paper's constants stand; docs/calibration.md)."""

from __future__ import annotations

from typing import Any

from tuiagent.training.calibrators import Calibrator


class PruneTIRCalibration(Calibrator):
    guard = "prunetir"
    order = 50

    def recommend(self, fitted: Any) -> tuple[bool, str]:
        return False, "not fitted here (it never acted on the default model under the default budget)"
