"""tuiagent.plugins: the one reader of entry points, used by the guard chain and the kernel registry."""

from __future__ import annotations

import pytest

from guards.base import SettingsError
from guards.chain import available, guard_class
from tuiagent import plugins
from tuiagent.errors import ConfigError
from tuiagent.runner import kernel_class, kernel_names

NOBODY = "tuiagent.no-such-group"


def test_names_and_load_read_the_installed_entry_points():
    assert {"prunetir", "attc", "tim"} <= set(plugins.names("tuiagent.guards"))
    assert plugins.load("tuiagent.guards", "tim", "guard").__name__ == "TIM"


def test_shipped_names_are_found_without_an_entry_point():
    shipped = {"noop": "kernels.noop:NoopKernel"}
    assert plugins.names(NOBODY, shipped) == ["noop"]
    assert plugins.load(NOBODY, "noop", "kernel", shipped=shipped).__name__ == "NoopKernel"


def test_an_unknown_name_raises_the_callers_error_listing_what_is_installed():
    with pytest.raises(LookupError, match=r"^no widget named 'x'; installed: none$"):
        plugins.load(NOBODY, "x", "widget")
    with pytest.raises(SettingsError, match=r"no guard named 'bogus'; installed: .*prunetir"):
        guard_class("bogus")
    with pytest.raises(ConfigError, match=r"no kernel named 'bogus'; installed: .*noop"):
        kernel_class("bogus")


def test_the_callers_list_the_same_names():
    assert available() == plugins.names("tuiagent.guards")
    assert {"jupyter", "noop", "oracle"} <= set(kernel_names())
