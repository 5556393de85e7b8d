"""Agent-OracleCalc kernel ("tool-use tax" conditions, arXiv 2605.00136): every output is the gold answer.

The condition measures what is left of the tool-use tax when the calculator is perfect: the
model writes code as usual and every call comes back with the right final answer. It needs
the gold answer of the run (``gold``); nothing executes.
"""

from __future__ import annotations

from kernels.noop import NoopKernel


class OracleKernel(NoopKernel):
    """A kernel whose every call prints ``gold``."""

    def __init__(self, *, gold: str | None = None, **_: object) -> None:
        if gold is None or not str(gold).strip():
            raise ValueError(
                "the oracle kernel prints the run's gold answer at every call, and this run has none: "
                "give one (--gold ANSWER, or a dataset with answers) or choose another kernel"
            )
        super().__init__(stub=str(gold).strip())
        self.gold = self.stub
