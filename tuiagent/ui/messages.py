"""What a screen asks of the app (messages go up; the app routes each to a dialog, a screen or
the controller, ``tuiagent.ui.app``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from textual.message import Message

from tuiagent.core import events as ev
from tuiagent.core.fork import EditTarget


@dataclass
class OpenReplay(Message):
    """Show this saved run on the replay screen."""

    path: Path


@dataclass
class OpenCompare(Message):
    """Show these saved runs side by side on the compare screen."""

    paths: list[Path]


@dataclass
class AskFork(Message):
    """Ask what a fork of ``parent`` runs under (and after which step, when ``step`` is None), then run it."""

    parent: Path
    step: int | None


@dataclass
class AskEdit(Message):
    """Edit ``target`` of the saved run ``parent``, then continue from the edit as a fork."""

    parent: Path
    target: EditTarget


@dataclass
class RerunAs(Message):
    """Run ``problem`` on the compare screen under ``columns`` (guard settings or presets)."""

    problem: str
    gold: str | None
    columns: list[str]


@dataclass
class ModelCrashed(Message):
    """A run (its ``events``) ended because the model's process died."""

    events: Sequence[ev.Event]


class RunPicked(Message):
    """Saved runs picked in the open-run dialog, and what to do with them: replay, compare, export, fork."""

    def __init__(self, pick: tuple[str, list[Path]]) -> None:
        self.what, self.paths = pick
        super().__init__()
