"""Agent-OracleCalc kernel ("tool-use tax" conditions, arXiv 2605.00136): every output is the gold answer.

The condition measures what is left of the tool-use tax when the calculator is perfect: the
model writes code as usual and every call comes back with the right final answer. It needs
the gold answer of the run (``gold``); nothing executes.
"""

from __future__ import annotations

import time

from kernels.base import Output, ToolResult


class OracleKernel:
    """A kernel whose every call prints ``gold``."""

    def __init__(self, *, gold: str | None = None, **_: object) -> None:
        if gold is None or not str(gold).strip():
            raise ValueError("the oracle kernel needs the gold answer of the run (RunRequest.gold)")
        self.gold = str(gold).strip()
        self.calls: list[str] = []

    async def start(self) -> None:
        return None

    async def execute(self, code: str, timeout: float | None = None) -> ToolResult:
        started = time.perf_counter()
        self.calls.append(code)
        return ToolResult(outputs=(Output("stdout", self.gold + "\n"),), duration_s=time.perf_counter() - started)

    async def interrupt(self) -> None:
        return None

    async def restart(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None

    async def __aenter__(self) -> OracleKernel:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()
