"""What the app and its command palette ask of the screen on top, as protocols: the app reads a
screen through them (``isinstance``) instead of probing it for attributes, and mypy checks each
screen against the protocol it is read through (``tuiagent.ui.app``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from textual.worker import Worker

from tuiagent.core import events as ev


@runtime_checkable
class RunScreen(Protocol):
    """A screen that shows runs."""

    def saved_runs(self) -> list[Path]:
        """The trajectories f9 exports (none yet: an empty list)."""
        ...


@runtime_checkable
class LiveRunScreen(RunScreen, Protocol):
    """A screen that runs problems in workers."""

    def worker_failed(self, worker: Worker[Any]) -> None:
        """One of the app's workers failed (the app has reported it): put the screen's state back."""
        ...


@runtime_checkable
class FieldsScreen(Protocol):
    """A screen with fields one types in (the help screen lists them)."""

    FIELDS: list[tuple[str, str]]  # (the field and its key, what to type in it)


@runtime_checkable
class ReplayedRun(Protocol):
    """A screen that steps through one recorded run (what ctrl+p searches in it)."""

    events: list[ev.Event]

    def go(self, position: int) -> None:
        """Show the run as it stood after ``position`` events."""
        ...
