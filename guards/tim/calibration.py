"""The TIM monitor's part of ``tuiagent calibrate`` (``tuiagent.training.calibrators``): nothing to
fit, a recommendation only."""

from __future__ import annotations

from typing import Any

from tuiagent.training.calibrators import Calibrator


class TIMCalibration(Calibrator):
    guard = "tim"
    order = 40

    def recommend(self, fitted: Any) -> tuple[bool, str]:
        return True, "the monitor only flags at the end: a run generates exactly what `none` generates"
