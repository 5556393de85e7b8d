"""ATTC's part of ``tuiagent calibrate`` (``tuiagent.training.calibrators``): each executed block's
confidence, by the guard's own function, and the rethink threshold fitted on them: blocks of right
runs should score higher (ATTC's premise); acting (a rethink) on one of them is the error.
The rule and what it found for the default model: docs/calibration.md ("The ATTC threshold")."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from guards.attc.guard import block_confidence
from tuiagent.training.calibrate_fit import RARE
from tuiagent.training.calibrators import (
    Ask,
    Block,
    Record,
    Threshold,
    ThresholdCalibrator,
    auroc_rows,
    auroc_text,
    fmt,
    guard_default,
)


class ATTCCalibration(ThresholdCalibrator):
    guard = "attc"
    label = "ATTC"
    order = 10
    act = "below"
    curve_columns = (("attc_bacc", "ATTC balanced accuracy"), ("attc_acts", "ATTC rethink rate"))

    async def measure(self, block: Block, ask: Ask | None) -> dict[str, Any]:
        conf, mean, n = block_confidence(block.turn_text, block.turn_tokens)
        return {"confidence": conf, "mean_logprob": mean, "tokens": n}

    def progress(self, record: Record) -> str:
        confs = [b["attc"]["confidence"] for b in record["tool"]["blocks"]]
        return f"conf {', '.join('n/a' if c is None else f'{c:.3f}' for c in confs) or '-'}"

    def score(self, block: Record) -> float | None:
        confidence: float | None = block["attc"].get("confidence")  # None: no closed block in the turn
        return confidence

    def acting_is_wrong(self, record: Record) -> bool:
        return bool(record["tool"]["correct"])  # a rethink in a right run only disturbs it

    def toml(self, fitted: Threshold | None, out_dir: Path, meta: Mapping[str, Any]) -> list[str]:
        if fitted is None:
            return []
        a = fitted.fit
        how = (
            f"Youden's J, blocks of right vs wrong runs separate ({auroc_text(a)})"
            if a.separated
            else f"no separation ({auroc_text(a)}): rethink on {a.action_rate:.0%} of training blocks"
        )
        return ["[guards.attc]", f"threshold = {a.threshold:.4f}  # [calibration] {how}", ""]

    def report(self, fitted: Threshold | None) -> list[str]:
        lines = ["## ATTC threshold", ""]
        if fitted is None:
            return [*lines, "Not fitted: the training blocks lack a right or a wrong run.", ""]
        a, ah = fitted.fit, fitted.heldout
        why_not = (
            "the training interval lies below 0.5: blocks of wrong runs are the more confident, the reverse "
            "of ATTC's premise"
            if a.interval[1] < 0.5
            else "the training interval includes 0.5, or too few questions"
        )
        return [
            *lines,
            f"Executed code blocks with a confidence: {a.n} in training ({a.n_positive} in right runs, "
            f"{a.groups} questions), {ah.n} held out ({ah.groups} questions).",
            "",
            "| | AUROC (right runs score higher) | 95% bootstrap interval (questions) |",
            "|---|---|---|",
            *auroc_rows(fitted),
            "",
            (
                f"Separated on training blocks: threshold {a.threshold:.4f} by Youden's J."
                if a.separated
                else f"**No separation** ({why_not}): "
                f"threshold {a.threshold:.4f}, the {RARE:.0%} quantile of training confidences (at most the reference "
                f"{guard_default('attc'):g}), so ATTC rarely says rethink."
            ),
            f"On held-out blocks at this threshold: rethink on {fmt(ah.action_rate * 100, 0)}% of blocks "
            f"({fmt(ah.action_rate_pos * 100, 0)}% in right runs, {fmt(ah.action_rate_neg * 100, 0)}% in wrong runs); "
            f"balanced accuracy {fmt(ah.balanced_accuracy)}. ATTC still appends its trust sentence after every other "
            "executed call.",
            "",
        ]

    def recommend(self, fitted: Threshold | None) -> tuple[bool, str]:
        return False, (
            "not measured in a run here: it appends a sentence after every executed call, so it changes "
            "every run with a tool call; off until an eval shows it does not lower accuracy"
        )
