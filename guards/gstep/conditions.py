"""The tool-use tax's seven conditions (arXiv 2605.00136, section 2.2) as changes to a run, in the
paper's order, and the paper's name of each. Registered under the ``tuiagent.conditions`` entry point,
so the setting grammar (``-c``, presets' ``condition``) knows them as words; what each one is here:
docs/papers/tool-use-tax.md#the-tool-use-tax-protocol. This module imports nothing: the grammar reads
it below the guards' layer."""

from __future__ import annotations

from typing import Any

CONDITIONS: dict[str, dict[str, Any]] = {
    "cot": {"mode": "cot"},
    "fcstyle": {"mode": "fcstyle"},  # the tool prompt, no tool access
    "noop": {"kernel": "noop"},
    "full": {},
    "oracle": {"kernel": "oracle"},
    "evidence": {"evidence": "oracle"},  # the question without its distractor
    "max1": {"max_tool_calls": 1},
}
LABELS = {
    "cot": "NoTool-CoT",
    "fcstyle": "NoTool-FCStyle",
    "noop": "Agent-NoopTool",
    "full": "Agent-Full",
    "oracle": "Agent-OracleCalc",
    "evidence": "Agent-OracleEvidence",
    "max1": "Agent-Max1Turn",
}
