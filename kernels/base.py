"""The kernel protocol and the result of one cell execution."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

OutputKind = Literal["stdout", "stderr", "result", "error", "display"]


@dataclass(frozen=True)
class Output:
    """One piece of what a cell produced, in the order it arrived.

    ``text`` is plain text (ANSI codes stripped); ``path`` is set for display
    data saved to disk (images), with ``mime`` naming its type.
    """

    kind: OutputKind
    text: str
    path: str | None = None
    mime: str | None = None


@dataclass(frozen=True)
class CellResult:
    """What one code cell did.

    ``error`` is true when the kernel reported an exception or the call timed
    out (docs/guards.md: empty stdout is not an error). ``restarted`` means the
    kernel had to be restarted and its state was lost.
    """

    outputs: tuple[Output, ...] = ()
    error: bool = False
    timed_out: bool = False
    died: bool = False
    restarted: bool = False
    error_name: str | None = None
    duration_s: float = 0.0
    notes: tuple[str, ...] = field(default=())

    @property
    def text(self) -> str:
        """Everything the cell produced as a reader sees it (saved images by name), plus kernel notes."""
        parts = [f"[image saved: {o.path.rsplit('/', 1)[-1]}]" if o.path else o.text for o in self.outputs]
        parts.extend(self.notes)
        return "\n".join(p.rstrip("\n") for p in parts if p)


@runtime_checkable
class Kernel(Protocol):
    """A stateful code executor; one per run."""

    async def start(self) -> None: ...

    async def execute(self, code: str, timeout: float) -> CellResult: ...

    async def interrupt(self) -> None: ...

    async def restart(self) -> None: ...

    async def shutdown(self) -> None: ...

    async def __aenter__(self) -> "Kernel": ...

    async def __aexit__(self, *exc: object) -> None: ...


class KernelFailed(RuntimeError):
    """The kernel could not start, or start again after a restart. ``str()`` is the whole account for
    a person: what happened, the kernel's own last lines of stderr, the likely cause and a fix."""

    def __init__(self, what: str, stderr: str = "", cause: str = "", fix: str = "", *, text: str | None = None) -> None:
        """``text``: the account as a run recorded it, for a caller that has only that."""
        super().__init__(what)
        self.what, self.stderr, self.cause, self.fix, self._text = what, stderr, cause, fix, text

    def __str__(self) -> str:
        if self._text is not None:
            return self._text
        lines = [f"the kernel could not start: {self.what}"]
        if self.stderr:
            lines += ["  the kernel printed:", *(f"    {line}" for line in self.stderr.splitlines())]
        if self.cause:
            lines.append(f"  likely cause: {self.cause}")
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)
