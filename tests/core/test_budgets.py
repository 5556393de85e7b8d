"""Budgets the guards need: a guard declares them (GuardBase.run_budget), the loop raises every
default budget the user did not set (CLI flag, preset, app field) and the transcript header says so."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict, dataclass

import pytest

import guards.chain as chain_mod
from guards.chain import GuardChain
from tuiagent.protocol import BudgetError, RunSettings, budget_words, with_guard_needs


def test_defaults_rise_to_the_most_any_guard_needs_and_say_which():
    s = with_guard_needs(RunSettings(), {"a": {"max_tool_calls": 6, "max_tokens": 4000}, "b": {"max_tool_calls": 9}})
    assert (s.max_tool_calls, s.max_tokens) == (9, 4000)
    assert s.raised == (("max_tokens", "a"), ("max_tool_calls", "b"))
    assert with_guard_needs(RunSettings(), {"a": {"max_tool_calls": 2}}) == RunSettings()  # never lowered
    assert with_guard_needs(RunSettings(), {"a": {"max_tool_calls": 6.5}}).max_tool_calls == 7
    assert with_guard_needs(RunSettings(), {"a": {"max_wall_s": 900}}).max_wall_s == 900.0


def test_a_budget_the_user_set_stays():
    mine = RunSettings(max_tool_calls=2, explicit=("max_tool_calls",))
    s = with_guard_needs(mine, {"prunetir": {"max_tool_calls": 9, "max_tokens": 5000}})
    assert (s.max_tool_calls, s.max_tokens, s.raised) == (2, 5000, (("max_tokens", "prunetir"),))


@pytest.mark.parametrize(
    "needs, words",
    [({"budget": 3}, "not a run budget"), ({"mode": 1}, "not a run budget"), ({"max_tool_calls": "9"}, "not a number")],
)
def test_a_bad_declaration_is_a_clear_error(needs, words):
    with pytest.raises(BudgetError, match=words):
        with_guard_needs(RunSettings(), {"g": needs})


def test_budget_words_label_raised_and_set_budgets():
    s = with_guard_needs(RunSettings(max_tokens=100, explicit=("max_tokens",)), {"prunetir": {"max_tool_calls": 9}})
    assert budget_words(asdict(s)) == (
        "max_tool_calls=9 (ours: prunetir needs it) max_tokens=100 (set) max_wall_s=600 "
        "exec_timeout_s=5 output_chars=400"
    )
    assert budget_words(s.record()) == budget_words(asdict(s))  # as a saved run holds them
    assert s.record()["raised"] == [["max_tool_calls", "prunetir"]] and s.record()["explicit"] == ["max_tokens"]


@dataclass
class _NoSettings:
    pass


class BadBudgetGuard:
    name, order, Settings = "badbudget", 70, _NoSettings

    def __init__(self, settings):
        self.settings = settings

    @classmethod
    def run_budget(cls, settings):
        return {"tool_calls": 9}


def test_a_guard_whose_declaration_is_wrong_stays_off_with_the_reason(monkeypatch):
    real = chain_mod.guard_class
    monkeypatch.setattr(chain_mod, "guard_class", lambda name: BadBudgetGuard if name == "badbudget" else real(name))
    chain = GuardChain({"prunetir": {}}, {"prunetir", "badbudget"})
    assert chain.needs() == {"prunetir": {"max_tool_calls": 9}}
    assert "badbudget" not in chain.enabled and "not a run budget" in chain.disabled_reason["badbudget"]
    assert [(t.guard, t.enabled) for t in chain.start()] == [("prunetir", True), ("badbudget", False)]


def tuiagent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuiagent", *args], capture_output=True, text=True, timeout=120, env=os.environ.copy()
    )


def test_the_transcript_header_shows_the_budgets_and_who_raised_them(write_script, tmp_path):
    script = write_script("\\boxed{3}")
    base = ("solve", "1+2", "-m", "scripted", "--script", str(script), "--out", str(tmp_path))
    out = tuiagent(*base, "--guard", "prunetir")
    assert out.returncode == 0, out.stderr
    assert "budgets: max_tool_calls=9 (ours: prunetir needs it) max_tokens=3072" in out.stdout
    out = tuiagent(*base, "--guard", "prunetir", "--max-tool-calls", "4")
    assert "budgets: max_tool_calls=4 (set) max_tokens=3072" in out.stdout
    out = tuiagent(*base)
    assert "budgets: max_tool_calls=4 max_tokens=3072" in out.stdout
    presets = tmp_path / "presets.toml"
    presets.write_text('[presets.tight]\nguards = ["prunetir"]\nrun = { max_tool_calls = 5 }\n', encoding="utf-8")
    config = os.environ["TUIAGENT_CONFIG_DIR"]
    os.makedirs(config, exist_ok=True)
    (presets.rename(os.path.join(config, "presets.toml")))
    out = tuiagent(*base, "--preset", "tight")
    assert out.returncode == 0, out.stderr
    assert "budgets: max_tool_calls=5 (set)" in out.stdout
