"""Errors a person can act on. The CLI prints them without a traceback and exits with ``exit_code``."""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix; ``str()`` is the whole message."""

    exit_code = 1


class ConfigError(UserError):
    """A configuration mistake: names the file, the key and the fix. Exit code 2."""

    exit_code = 2

    def __init__(self, problem: str, *, file: str | None = None, key: str | None = None, fix: str | None = None):
        self.problem, self.file, self.key, self.fix = problem, file, key, fix
        where = " ".join(p for p in (file and f"in {file}", key and f"at key '{key}'") if p)
        message = f"{where}: {problem}" if where else problem
        if fix:
            message += f"\n  fix: {fix}"
        super().__init__(message)


class ModelUnavailable(ConfigError):
    """The model's weights are not here (and will not be fetched without asking)."""
