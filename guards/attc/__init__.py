"""ATTC (arXiv 2604.08281): the guard (``guard``) and its judged audits of whole runs (``audit``).

The package exports its guard class, the name its ``tuiagent.guards`` entry point gives."""

from guards.attc.guard import ATTC

__all__ = ["ATTC"]
