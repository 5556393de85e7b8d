"""A model's calibration file: its guard values become the model's defaults (below models.toml's own
guard tables), its presets give the model its own `recommended`, and a broken file is a clear error."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tuiagent.config import load_models
from tuiagent.config.calibration import load_calibration
from tuiagent.errors import ConfigError
from tuiagent.presets import find_preset

CALIBRATION = """
[calibration]
model = "m"
date = "2026-12-01"
train_questions = 40

[guards.attc]
threshold = 0.91  # [calibration]

[guards.necessity]
threshold = 0.8

[guards.gstep]
weights = "./m-gstep.npz"
tau = 0.3

[presets.recommended]
description = "m's own"
guards = ["necessity", "tim", "attc"]
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def models_file(tmp_path: Path, calibration: str = "cal/m.toml", own: str = "") -> Path:
    return write(
        tmp_path / "models.toml",
        f"""
        [models.m]
        backend = "scripted"
        calibration = "{calibration}"
        [models.m.source]
        kind = "script"
        {own}
        """,
    )


def test_calibrated_values_are_the_models_defaults_below_its_own(tmp_path):
    write(tmp_path / "cal" / "m.toml", CALIBRATION)
    own = "[models.m.guards.attc]\nthreshold = 0.99"
    spec = load_models(models_file(tmp_path, own=own)).get("m")
    assert spec.calibration is not None and spec.calibration.meta["train_questions"] == 40
    assert spec.guards["attc"] == {"threshold": 0.99}  # models.toml's own value wins
    assert spec.guards["necessity"] == {"threshold": 0.8}
    assert spec.guards["gstep"]["weights"] == str(tmp_path / "cal" / "m-gstep.npz")  # "./": relative to the file


def test_the_model_gets_its_own_recommended_preset(tmp_path, monkeypatch):
    write(tmp_path / "cal" / "m.toml", CALIBRATION)
    models = models_file(tmp_path)
    assert find_preset("recommended", model="m", models_file=models).spec.guards == ("necessity", "tim", "attc")
    assert find_preset("recommended").spec.guards == ("necessity", "tim")  # the default model's (the shipped one)
    assert find_preset("flag-only", model="m", models_file=models).spec.guards == ("necessity", "tim")


@pytest.mark.parametrize(
    "text, message",
    [
        ("[calibration\nmodel = 'm'", "not valid TOML"),
        ("[guards.attc]\nthreshold = 0.9", r"no \[calibration\] table"),
        ("[calibration]\nmodel = 'm'\nsize = 3", "unknown key"),
        ("[calibration]\nmodel = 'm'\ntrain_questions = 'many'", "expected int"),
        ("[calibration]\nmodel = 'm'\n[guards]\nattc = 0.9", "must be a table of settings"),
        ("[calibration]\nmodel = 'm'\n[tables]\nx = 1", "unknown table"),
    ],
)
def test_a_broken_calibration_file_is_a_config_error_naming_it(tmp_path, text, message):
    path = write(tmp_path / "cal" / "m.toml", text)
    with pytest.raises(ConfigError, match=message) as e:
        load_models(models_file(tmp_path))
    assert str(path) in str(e.value)


def test_a_missing_calibration_file_says_how_to_make_one(tmp_path):
    with pytest.raises(ConfigError, match="calibration file not found") as e:
        load_calibration(tmp_path / "nope.toml")
    assert "tuiagent calibrate" in str(e.value)


def test_a_bad_calibrated_value_names_the_model(tmp_path):
    write(tmp_path / "cal" / "m.toml", CALIBRATION.replace("0.91", "1.5"))
    from tuiagent.core.run_spec import RunSpec
    from tuiagent.runner import guard_chain

    spec = load_models(models_file(tmp_path)).get("m")
    with pytest.raises(ConfigError, match="attc"):
        guard_chain(spec, RunSpec(guards=("attc",)))


def test_resolve_lays_the_layers_in_their_documented_order(tmp_path):
    """runner.resolve: shipped defaults < calibration < the model's models.toml tables < the run's spec
    (a preset with the command line over it); the chain's settings come out of it."""
    from tuiagent.core.run_spec import RunSpec
    from tuiagent.protocol import RunSettings, Sampling
    from tuiagent.runner import guard_chain, resolve

    write(tmp_path / "cal" / "m.toml", CALIBRATION)
    own = "[models.m.guards.attc]\nthreshold = 0.99\n[models.m.sampling]\ntemperature = 0.3"
    spec = load_models(models_file(tmp_path, own=own)).get("m")
    bare = resolve(RunSpec(), spec)
    assert bare.settings == RunSettings() and bare.kernel == "jupyter" and not bare.guards_on
    assert bare.sampling.temperature == 0.3 and bare.sampling.top_p == Sampling().top_p  # models.toml, then default
    assert bare.guard_configs["attc"] == {"threshold": 0.99} and bare.guard_configs["necessity"] == {"threshold": 0.8}
    preset = RunSpec(guards=("attc",), guard_settings={"attc": {"threshold": 0.9}}, sampling={"temperature": 0.5})
    typed = RunSpec(run={"max_tool_calls": 2}, sampling={"temperature": 0.7})
    run = resolve(preset.merged(typed), spec)
    assert run.guards_on == {"attc"} and run.guard_configs["attc"] == {"threshold": 0.9}
    assert (run.sampling.temperature, run.settings.max_tool_calls, run.settings.explicit) == (
        0.7,
        2,
        ("max_tool_calls",),
    )
    chain = guard_chain(spec, preset.merged(typed))
    assert chain is not None and chain.settings["attc"].threshold == 0.9 and chain.enabled == {"attc"}
    assert set(resolve(RunSpec(), spec, toggleable=True).guard_configs) >= {"attc", "prunetir", "gstep", "tim"}


def test_a_process_reads_its_models_files_once_and_again_when_one_changes(tmp_path, monkeypatch):
    """load_models keeps what it read while every file it came from (the models files, present or
    not, and each calibration file an entry names) stays as it was."""
    monkeypatch.setenv("TUIAGENT_CONFIG_DIR", str(tmp_path / "config"))
    calibration = write(tmp_path / "cal" / "m.toml", CALIBRATION)
    file = models_file(tmp_path)
    first = load_models(file)
    assert load_models(file) is first  # read once
    calibration.write_text(CALIBRATION.replace("threshold = 0.91", "threshold = 0.93"))
    again = load_models(file)
    assert again is not first and again.get("m").guards["attc"] == {"threshold": 0.93}  # the calibration changed
    assert load_models(file) is again
    file.write_text(file.read_text() + '\n[models.n]\nbackend = "scripted"\n[models.n.source]\nkind = "script"\n')
    assert "n" in load_models(file)  # the models file changed
    write(tmp_path / "config" / "models.toml", '[models.u]\nbackend = "scripted"\n[models.u.source]\nkind = "script"\n')
    assert "u" in load_models(file)  # a user models file that appeared since
