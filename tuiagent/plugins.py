"""Plug-ins found by entry point: the one place that reads ``importlib.metadata.entry_points``.

Guards register under "tuiagent.guards" (``guards.chain``), kernels under "tuiagent.kernels"
(``tuiagent.runner``). ``shipped`` maps a name to "module:attr" for plug-ins that ship with
tuiagent and must be found even when the installed entry points predate them.

The entry points are read once per group and import path (``sys.path``): reading them walks the
metadata of every installed distribution (5-12 ms here), and a run looks a guard up many times. A
plug-in whose distribution lands on a directory already on the path while a process runs is found
by the next process; one added with its own path entry is found at once.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Mapping


def _registered(group: str) -> tuple[importlib.metadata.EntryPoint, ...]:
    return _read(group, tuple(sys.path))


@functools.lru_cache(maxsize=64)
def _read(group: str, path: tuple[str, ...]) -> tuple[importlib.metadata.EntryPoint, ...]:
    return tuple(importlib.metadata.entry_points(group=group))


def names(group: str, shipped: Mapping[str, str] | None = None) -> list[str]:
    """Names registered under ``group`` (and those in ``shipped``), without importing any of them."""
    return sorted({ep.name for ep in _registered(group)} | set(shipped or ()))


def load(
    group: str,
    name: str,
    kind: str,
    *,
    shipped: Mapping[str, str] | None = None,
    error: Callable[[str], Exception] = LookupError,
) -> type:
    """The object registered as ``name`` under ``group``, else the one ``shipped`` names.

    Raises ``error("no <kind> named '<name>'; installed: <names>")`` when there is none, so each
    caller keeps its own error type.
    """
    for ep in _registered(group):
        if ep.name == name:
            found: type = ep.load()
            return found
    if shipped and name in shipped:
        module, _, attr = shipped[name].partition(":")
        shipped_class: type = getattr(importlib.import_module(module), attr)
        return shipped_class
    raise error(f"no {kind} named {name!r}; installed: {', '.join(names(group, shipped)) or 'none'}")
