"""The one run specification: its merge rule, its defaults, and the one grammar that ``--set``,
compare columns, ``--preset`` and ``eval -c`` read (every form the three older grammars read)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuiagent.core.run_spec import DEFAULTS, MODES, RUN_KEYS, SAMPLING_KEYS, Grammar, RunSpec
from tuiagent.errors import ConfigError
from tuiagent.protocol import BUDGETS, FIRST_CALLS, TOOLS, RunSettings

GUARDS = ["attc", "gstep", "necessity", "prunetir", "tim"]
CONDITIONS = {
    "full": {},
    "cot": {"mode": "cot"},
    "noop": {"kernel": "noop"},
    "oracle": {"kernel": "oracle"},
    "max1": {"max_tool_calls": 1},
}
STRICT = RunSpec(
    guards=("attc",),
    guard_settings={"attc": {"threshold": 0.99}},
    run={"max_tool_calls": 6},
    sampling={"temperature": 0.5},
)
WORDS = Grammar(GUARDS, CONDITIONS, {"strict": STRICT})


def test_later_wins_and_given_beats_default():
    cli = RunSpec(guards=("tim",), guard_settings={"attc": {"threshold": 0.9}}, run={"max_tokens": 100})
    merged = STRICT.merged(cli)
    assert merged.guards == ("attc", "tim")  # guards add up
    assert merged.guard_settings == {"attc": {"threshold": 0.9}}  # a setting given later wins
    assert merged.run == {"max_tool_calls": 6, "max_tokens": 100} and merged.sampling == {"temperature": 0.5}
    assert STRICT.merged(RunSpec()) == STRICT and RunSpec().merged(STRICT) == STRICT  # nothing given changes nothing
    assert RunSpec().merged(RunSpec()).guards is None  # guards not given stay not given (a fork keeps the parent's)


def test_settings_take_the_defaults_for_what_was_not_given():
    assert RunSpec().settings() == RunSettings() == DEFAULTS
    settings = STRICT.merged(RunSpec(run={"kernel": "noop", "mode": "cot"})).settings()
    assert (settings.max_tool_calls, settings.mode, settings.max_tokens) == (6, "cot", DEFAULTS.max_tokens)
    assert settings.explicit == ("max_tool_calls",)  # given budgets are the user's: no guard raises them
    assert RunSpec(run={b: 1 for b in BUDGETS}).settings().explicit == BUDGETS
    with pytest.raises(ValueError, match="exec_timeout_s"):
        RunSpec(run={"exec_timeout_s": 0.0}).settings()


@pytest.mark.parametrize(
    "text, guards, guard_settings, run, sampling, condition",
    [
        # eval -c
        ("none", (), {}, {}, {}, "full"),
        ("all", ("all",), {}, {}, {}, None),
        ("attc+prunetir:attc.threshold=0.9", ("attc", "prunetir"), {"attc": {"threshold": "0.9"}}, {}, {}, None),
        ("full:max_tool_calls=8", (), {}, {"max_tool_calls": 8}, {}, "full"),
        ("none:max_tool_calls=8", (), {}, {"max_tool_calls": 8}, {}, None),
        ("cot", (), {}, {"mode": "cot"}, {}, "cot"),
        ("noop+attc", ("attc",), {}, {"kernel": "noop"}, {}, None),
        ("attc:temperature=0.7,top_k=40", ("attc",), {}, {}, {"temperature": 0.7, "top_k": 40}, None),
        # compare columns
        ("attc prunetir attc.threshold=0.9", ("attc", "prunetir"), {"attc": {"threshold": "0.9"}}, {}, {}, None),
        ("attc, prunetir", ("attc", "prunetir"), {}, {}, {}, None),
        ("None", (), {}, {}, {}, "full"),
        (
            "strict prunetir",
            ("attc", "prunetir"),
            {"attc": {"threshold": 0.99}},
            {"max_tool_calls": 6},
            {"temperature": 0.5},
            None,
        ),
        (
            "strict+tim:attc.threshold=0.9,max_tool_calls=2",
            ("attc", "tim"),
            {"attc": {"threshold": "0.9"}},
            {"max_tool_calls": 2},
            {"temperature": 0.5},
            None,
        ),
    ],
)
def test_every_older_form_still_reads(text, guards, guard_settings, run, sampling, condition):
    spec = WORDS.parse(text)
    assert (spec.guards, spec.guard_settings, spec.run, spec.sampling, spec.condition) == (
        guards,
        guard_settings,
        run,
        sampling,
        condition,
    )


def test_the_run_budget_and_one_turns_limit_have_their_own_names():
    spec = WORDS.parse("attc:max_tokens=2000,turn_max_tokens=256")
    assert spec.run == {"max_tokens": 2000} and spec.sampling == {"max_tokens": 256}  # Sampling's own field
    assert WORDS.text(spec) == "attc:max_tokens=2000,turn_max_tokens=256"
    with pytest.raises(ConfigError, match="turn_max_tokens must be 1 or more"):
        WORDS.parse("attc:turn_max_tokens=0")


def test_a_preset_name_alone_is_that_preset_and_set_items_are_settings_alone():
    assert WORDS.parse("strict") is STRICT
    sets = WORDS.assignments(["attc.threshold=0.95", "max_tool_calls=6", "temperature=0.2", "mode=cot"])
    assert sets == RunSpec(
        guards=None,
        guard_settings={"attc": {"threshold": "0.95"}},
        run={"max_tool_calls": 6, "mode": "cot"},
        sampling={"temperature": 0.2},
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "an empty setting"),
        ("bogus", "'bogus' is not a guard, a condition or a preset"),
        ("attc:threshold=0.9", "unknown setting 'threshold'"),
        ("attc:max_tool_calls=x", "must be a number"),
        ("attc:max_tool_calls=-1", "must be 0 or more"),
        ("attc:mode=python", "mode must be one of tool, cot, fcstyle"),
        ("full:evidence=clean", "evidence can only be oracle"),
        ("full:tool=abacus", "tool must be one of python, calculator"),
        ("attc:oops", "is not KEY=VALUE"),
        ("threshold=1", "unknown setting 'threshold'"),
        ("attc gstep.tau=0.5", "sets gstep, which it does not turn on"),
        ("none:attc.threshold=0.9", "sets attc, which it does not turn on"),
        ("cot+noop", "more than one condition"),
    ],
)
def test_mistakes_say_what_is_wrong(text, message):
    with pytest.raises(ConfigError, match=message):
        WORDS.parse(text)


VALUE = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._/-", min_size=1, max_size=8)
NUMBER = {
    int: st.integers(1, 10_000),
    float: st.floats(0, 1e6, allow_nan=False, allow_infinity=False),
}


@st.composite
def setting_texts(draw: st.DrawFn) -> str:
    """A setting string as a user would type it: parts in some order and separator, then KEY=VALUE items."""
    parts = draw(st.lists(st.sampled_from([*GUARDS, "all", "none", "strict"]), max_size=4))
    parts += draw(st.lists(st.sampled_from(list(CONDITIONS)), max_size=1))
    parts = draw(st.permutations(parts)) if parts else ["none"]
    on = [p for p in parts if p in GUARDS]
    items = (
        [
            f"{g}.{draw(st.sampled_from(['threshold', 'window', 'tau']))}={draw(VALUE)}"
            for g in draw(st.lists(st.sampled_from(on), max_size=2))
        ]
        if on
        else []
    )
    for key in draw(
        st.lists(st.sampled_from([k for k in RUN_KEYS if k != "kernel"] + list(SAMPLING_KEYS)), max_size=3)
    ):
        choices = {"evidence": ["oracle"], "tool": list(TOOLS), "first_call": list(FIRST_CALLS), "mode": list(MODES)}
        value = draw(st.sampled_from(choices[key])) if key in choices else draw(NUMBER[(RUN_KEYS | SAMPLING_KEYS)[key]])
        items.append(f"{key}={value}")
    sep = draw(st.sampled_from(["+", " ", ", "]))
    return sep.join(parts) + (":" + ",".join(items) if items else "")


# A preset written as a string (a TOML preset's values keep their TOML types, which text cannot carry).
TYPED = Grammar(
    GUARDS, CONDITIONS, {"strict": WORDS.parse("attc:attc.threshold=0.99,max_tool_calls=6,temperature=0.5")}
)


@settings(max_examples=300, deadline=None)
@given(setting_texts())
def test_the_grammar_round_trips(text):
    spec = TYPED.parse(text)
    again = TYPED.text(spec)
    assert TYPED.parse(again) == spec, (text, again)
    assert TYPED.text(TYPED.parse(again)) == again  # the written form is canonical


def test_the_written_form_names_everything_in_force():
    assert (
        WORDS.text(WORDS.parse("strict prunetir"))
        == "attc+prunetir:attc.threshold=0.99,max_tool_calls=6,temperature=0.5"
    )
    assert [WORDS.text(WORDS.parse(t)) for t in ("none", "full", "cot", "max1:max_tool_calls=3", "noop+attc")] == [
        "none",
        "none",
        "cot",
        "max1:max_tool_calls=3",
        "attc:kernel=noop",
    ]
