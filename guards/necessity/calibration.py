"""The necessity guard's part of ``tuiagent calibrate`` (``tuiagent.training.calibrators``): each
executed block judged by the arithmetic rule and, asked after the run so its tokens are untouched,
by the model itself; the model judge's threshold fitted on them. A block counts as needed when the
model's own chain-of-thought run got the question wrong: skipping it there is the error.
docs/calibration.md ("The necessity threshold")."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from guards.necessity.guard import Necessity, arithmetic_judge
from tuiagent.protocol import RunView
from tuiagent.training.calibrators import (
    Ask,
    Block,
    Record,
    Threshold,
    ThresholdCalibrator,
    auroc_rows,
    auroc_text,
    fmt,
)


class NecessityCalibration(ThresholdCalibrator):
    guard = "necessity"
    label = "necessity"
    order = 20
    act = "above"
    curve_columns = (("necessity_bacc", "necessity balanced accuracy"), ("necessity_acts", "necessity skip rate"))

    async def measure(self, block: Block, ask: Ask | None) -> dict[str, Any]:
        necessary, p_rule, _ = arithmetic_judge(block.code, question=block.problem)
        entry: dict[str, Any] = {"rule": {"necessary": necessary, "p_unnecessary": p_rule}}
        if ask is not None:
            view = RunView(
                problem=block.problem,
                mode="tool",
                turn=block.turn,
                turn_text=block.turn_text,
                turn_tokens=list(block.turn_tokens),
                calls=(),
                segments=(),
                max_tool_calls=0,
                tools_suspended=False,
                judge=ask,
            )
            verdict = await Necessity(Necessity.Settings(judge="model")).on_code(block.code, view)
            entry["model"] = {k: v for k, v in verdict.data.items() if k not in ("mode", "threshold", "skipped")}
        return entry

    def score(self, block: Record) -> float | None:
        """P(unnecessary) from the model judge; None where a rule answered instead."""
        model = block["necessity"].get("model", {})
        return model["p_unnecessary"] if model.get("judge") == "model" else None

    def acting_is_wrong(self, record: Record) -> bool:
        return not record["cot"]["correct"]  # the tool was needed: the CoT run got it wrong

    def toml(self, fitted: Threshold | None, out_dir: Path, meta: Mapping[str, Any]) -> list[str]:
        if fitted is None:
            return []
        n = fitted.fit
        how = (
            f"Youden's J ({auroc_text(n)})"
            if n.separated
            else f"no separation ({auroc_text(n)}): enforce would skip {n.action_rate:.0%} of training blocks"
        )
        return ["[guards.necessity]", f"threshold = {n.threshold:.4f}  # [calibration] model judge: {how}", ""]

    def report(self, fitted: Threshold | None) -> list[str]:
        lines = ["## Necessity, model judge threshold", ""]
        if fitted is None:
            return [
                *lines,
                "Not fitted: no model-judge verdicts on blocks of both kinds (tool needed: CoT wrong; not needed: "
                "CoT right).",
                "",
            ]
        n, nh = fitted.fit, fitted.heldout
        return [
            *lines,
            "A block counts as needed when the model's own chain-of-thought run got the question wrong, as not "
            f"needed when it got it right. Blocks with a model verdict: {n.n} in training ({n.n_positive} needed), "
            f"{nh.n} held out.",
            "",
            "| | AUROC (needed blocks get lower P(unnecessary)) | 95% bootstrap interval |",
            "|---|---|---|",
            *auroc_rows(fitted),
            "",
            (
                f"Separated: threshold {n.threshold:.4f} by Youden's J."
                if n.separated
                else f"**No separation**: threshold {n.threshold:.4f}, so enforce mode would rarely skip."
            ),
            f"Held out at this threshold, enforce would skip {fmt(nh.action_rate * 100, 0)}% of blocks "
            f"({fmt(nh.action_rate_pos * 100, 0)}% of needed ones, {fmt(nh.action_rate_neg * 100, 0)}% of the others).",
            "",
        ]

    def recommend(self, fitted: Threshold | None) -> tuple[bool, str]:
        return True, "flag mode only annotates: a run generates exactly what `none` generates"
