"""PruneTIR (shared/papers/004): the guard (``guard``) and its analyses of an eval's runs (``analysis``).

The package exports its guard class, the name its ``tuiagent.guards`` entry point gives."""

from guards.prunetir.guard import PruneTIR

__all__ = ["PruneTIR"]
