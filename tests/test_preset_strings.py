"""--config strings, named TOML configs and the tool-use-tax protocol."""

from __future__ import annotations

import pytest

from tuiagent.errors import ConfigError
from tuiagent.eval.protocols import settings_of
from tuiagent.presets import load_preset_file, parse_config, resolve_settings


def test_guard_combinations_and_settings():
    s = parse_config("attc+prunetir:attc.threshold=0.9,prunetir.turn_limit=2,max_tool_calls=6,temperature=0.7")
    assert s.name == "attc+prunetir:attc.threshold=0.9,prunetir.turn_limit=2,max_tool_calls=6,temperature=0.7"
    assert s.spec.guards == ("attc", "prunetir")
    assert s.spec.guard_settings == {"attc": {"threshold": "0.9"}, "prunetir": {"turn_limit": "2"}}
    assert s.spec.run == {"max_tool_calls": 6} and s.spec.sampling == {"temperature": 0.7}
    assert (s.spec.mode, s.spec.kernel, s.spec.condition) == ("tool", "jupyter", None)
    assert parse_config("none").spec.guards == () and parse_config("none").spec.condition == "full"
    assert parse_config("all").spec.guards == ("all",)


def test_conditions():
    assert (parse_config("cot").spec.mode, parse_config("cot").spec.condition) == ("cot", "cot")
    assert (parse_config("noop").spec.kernel, parse_config("oracle").spec.kernel) == ("noop", "oracle")
    assert parse_config("max1").spec.run == {"max_tool_calls": 1}
    mixed = parse_config("noop+attc")
    assert mixed.spec.kernel == "noop" and mixed.spec.guards == ("attc",) and mixed.spec.condition is None
    with pytest.raises(ConfigError, match="more than one condition"):
        parse_config("cot+noop")


@pytest.mark.parametrize(
    "text, message",
    [
        ("attcc", "'attcc' is not a guard"),
        ("attc:threshold=0.9", "unknown setting 'threshold'"),
        ("attc:max_tool_calls=x", "must be a number"),
        ("attc:mode=python", "mode must be one of tool, cot, fcstyle"),
        ("evidence:evidence=gold", "evidence can only be oracle"),
        ("attc:oops", "is not KEY=VALUE"),
        ("attc:gstep.tau=0.5", "sets gstep, which it does not turn on"),
        ("none:attc.threshold=0.9", "sets attc, which it does not turn on"),
    ],
)
def test_mistakes_say_what_is_allowed(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(text)


def test_named_configs_from_toml(tmp_path):
    path = tmp_path / "configs.toml"
    path.write_text("""
[configs.strict]
guards = ["attc", "prunetir"]
run = { max_tool_calls = 6 }
sampling = { temperature = 0.5 }
[configs.strict.guard_settings.attc]
threshold = 0.99

[configs.calc]
condition = "oracle"
""")
    named = load_preset_file(path)
    strict = named["strict"]
    assert strict.spec.guards == ("attc", "prunetir") and strict.spec.guard_settings == {"attc": {"threshold": 0.99}}
    assert strict.spec.run == {"max_tool_calls": 6} and strict.spec.sampling == {"temperature": 0.5}
    assert (named["calc"].spec.kernel, named["calc"].spec.condition) == ("oracle", "oracle")
    settings = resolve_settings(["none", "strict"], named=named)
    assert [s.name for s in settings] == ["none", "strict"]
    assert [s.name for s in resolve_settings([], named=named, default=list(named))] == ["strict", "calc"]
    bad = tmp_path / "bad.toml"
    bad.write_text('[configs.x]\nguards = ["nope"]\n')
    with pytest.raises(ConfigError, match="'nope' is not an installed guard"):
        load_preset_file(bad)


def test_protocol_adds_the_seven_conditions_once():
    settings = resolve_settings(["attc", "cot"], added=settings_of("tooltax"))
    assert [s.name for s in settings] == ["attc", "cot", "full", "fcstyle", "noop", "oracle", "evidence", "max1"]
    by_name = {s.name: s for s in settings}
    assert (by_name["fcstyle"].spec.mode, by_name["evidence"].spec.evidence, by_name["full"].spec.evidence) == (
        "fcstyle",
        "oracle",
        "as written",
    )
    assert [s.name for s in resolve_settings([])] == ["none"]
    with pytest.raises(
        ConfigError, match=r"unknown protocol 'nope'\n  fix: use one of .*prunetir-ablation, tim, tooltax"
    ):
        settings_of("nope")


def test_fingerprint_changes_with_what_the_setting_does():
    a, b = parse_config("attc:attc.threshold=0.9"), parse_config("attc:attc.threshold=0.95")
    assert a.fingerprint() != b.fingerprint()
    assert a.fingerprint({"run": {"max_tool_calls": 4}}) != a.fingerprint({"run": {"max_tool_calls": 5}})
    assert a.fingerprint() == parse_config("attc:attc.threshold=0.9").fingerprint()


def test_a_named_config_that_sets_a_guard_it_does_not_turn_on_is_refused(tmp_path):
    path = tmp_path / "configs.toml"
    path.write_text('[configs.odd]\nguards = ["attc"]\n[configs.odd.guard_settings.gstep]\ntau = 0.5\n')
    with pytest.raises(ConfigError, match="configs.odd sets gstep, which it does not turn on"):
        load_preset_file(path)


def test_a_setting_named_as_eval_faithful_names_it_is_that_setting_under_the_paper_profile():
    from tuiagent.presets import faithful, faithful_preset

    again = parse_config("attc (faithful)")
    assert again == faithful_preset(parse_config("attc")) and again.name == "attc (faithful)"
    assert again.spec == faithful(parse_config("attc").spec)
    assert again.spec.guard_settings["attc"]["threshold"] == 0.97  # the reference code's, not a calibration's
    assert parse_config("none (faithful)").spec.guard_settings == {}
