"""The tool-use tax (arXiv 2605.00136): the G-STEP gate (``guard``, its features in ``features``) and
the paper's protocol (``protocol``: seven conditions, the Δ chain and A-F taxonomy of ``tooltax``, in
the paper's layout by ``tooltax_tables``).

The package exports its guard class, the name its ``tuiagent.guards`` entry point gives."""

from guards.gstep.guard import GStep

__all__ = ["GStep"]
