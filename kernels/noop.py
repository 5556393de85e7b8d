"""Agent-NoopTool kernel ("tool-use tax" conditions, arXiv 2605.00136): the protocol runs, nothing executes.

Every call answers with the same stub, so the model pays the protocol's cost (writing code,
waiting for and reading an output block) without getting any computation back. The stub is
neutral on purpose: it neither helps nor says that the tool is fake.
"""

from __future__ import annotations

import time

from kernels.base import CellResult, Output

STUB = "Done."


class NoopKernel:
    """A kernel that executes nothing; ``stub`` is the text every call returns."""

    def __init__(self, *, stub: str = STUB, **_: object) -> None:
        self.stub = stub
        self.calls: list[str] = []

    async def start(self) -> None:
        return None

    async def execute(self, code: str, timeout: float | None = None) -> CellResult:
        started = time.perf_counter()
        self.calls.append(code)
        return CellResult(outputs=(Output("stdout", self.stub + "\n"),), duration_s=time.perf_counter() - started)

    async def interrupt(self) -> None:
        return None

    async def restart(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None

    async def __aenter__(self) -> NoopKernel:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()
