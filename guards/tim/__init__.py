"""Tool-induced myopia (arXiv 2511.10899): the prompt and monitor guard (``guard``, the monitor's
reading in ``monitor``) and the TIM protocol (``protocol``, its metrics in ``metrics``).

The package exports its guard class, the name its ``tuiagent.guards`` entry point gives."""

from guards.tim.guard import TIM

__all__ = ["TIM"]
