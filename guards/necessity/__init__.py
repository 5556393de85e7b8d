"""Spurious tool use (arXiv 2609.16268): the necessity guard (``guard``, its arithmetic judge in
``arithmetic``) and the cue probe (``cue_probe``).

The package exports its guard class, the name its ``tuiagent.guards`` entry point gives."""

from guards.necessity.guard import Necessity

__all__ = ["Necessity"]
