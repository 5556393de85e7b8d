"""Errors as a person reads them in a notice."""

from __future__ import annotations

from tuiagent.errors import UserError


def describe_error(error: BaseException) -> str:
    """A readable line for an exception (user errors carry their own fix)."""
    if isinstance(error, UserError):
        return str(error)
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
