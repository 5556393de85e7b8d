"""Every loader of a file a user hands the program, given arbitrary bytes, wrong types, huge numbers,
deep nesting and control characters (hypothesis): it loads, or it fails with the project's own error
(a UserError: one line and an exit code, never a traceback), a ConfigError naming its fix. Nothing
else may escape: not a TypeError from a value of the wrong type, a RecursionError from nesting, an
OverflowError from a huge number or a UnicodeDecodeError (issue 40, item 5)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuiagent.errors import ConfigError, UserError

SHIPPED = Path(__file__).resolve().parents[1] / "tuiagent"

# Scalars a hostile or careless file holds: wrong types, huge and non-finite numbers, control characters.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=40),
    st.sampled_from(["", "\x1b]0;x\x07", "\u2028", "\x00", "42", "tool", "none", "1e999", "-1"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def json_lines(objects: list[Any]) -> bytes:
    return ("\n".join(json.dumps(o) for o in objects) + "\n").encode()


# What a file may hold: raw bytes, JSON lines of anything, nesting past the parser's recursion limit.
contents = st.one_of(
    st.binary(max_size=1500),
    st.lists(json_values, max_size=6).map(json_lines),
    st.integers(min_value=900, max_value=200_000).map(lambda n: deep(n).encode()),
    st.text(max_size=300).map(lambda t: t.encode("latin-1", "replace")),
)


def toml_value(value: Any) -> str:
    """A TOML rendering of a JSON value (tables inline), to put in a real file's place."""
    if value is None:
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def mutated(text: str) -> st.SearchStrategy[bytes]:
    """``text`` (a real TOML file) with one of its values replaced by anything, or cut anywhere."""
    lines = text.splitlines()
    valued = [i for i, line in enumerate(lines) if "=" in line and not line.lstrip().startswith("#")]

    def replace(i: int, value: Any) -> bytes:
        key = lines[i].split("=", 1)[0]
        return "\n".join([*lines[:i], f"{key}= {toml_value(value)}", *lines[i + 1 :]]).encode()

    return st.one_of(
        st.tuples(st.sampled_from(valued), json_values).map(lambda p: replace(*p)),
        st.integers(min_value=0, max_value=len(text)).map(lambda n: text[:n].encode()),
    )


def models_toml() -> str:
    return (SHIPPED / "models.toml").read_text(encoding="utf-8")


def presets_toml() -> str:
    return (SHIPPED / "presets.toml").read_text(encoding="utf-8")


def calibration_toml() -> str:
    return (SHIPPED / "calibration" / "qwen2.5-coder-1.5b.toml").read_text(encoding="utf-8")


def load_models(path: Path) -> object:
    from tuiagent.config import load_models

    return load_models(path)


def load_presets(path: Path) -> object:
    from tuiagent.presets import load_preset_file

    return load_preset_file(path)


def load_calibration(path: Path) -> object:
    from tuiagent.config.calibration import load_calibration

    return load_calibration(path)


def load_dataset(path: Path) -> object:
    from tuiagent.eval.datasets import load_jsonl

    return load_jsonl(path)


def load_script(path: Path) -> object:
    from tuiagent.backends.scripted import load_script

    return load_script(path)


def load_trajectory(path: Path) -> object:
    from tuiagent.core.trajectory import load

    return load(path)


def load_export(path: Path) -> object:
    from tuiagent.export.document import load_run

    return load_run(path)


def load_results(path: Path) -> object:
    from tuiagent.eval.results import ResultStore

    path.rename(path.with_name("results.jsonl"))
    return ResultStore(path.parent).records


def load_manifest(path: Path) -> object:
    from tuiagent.eval.results import ResultStore

    path.rename(path.with_name("eval.json"))
    return ResultStore(path.parent).manifest()


def with_trajectory_header(data: bytes) -> bytes:
    """A trajectory's first line (so the loader reads on), then anything."""
    from tuiagent.core import events as ev

    return json.dumps({"schema": ev.SCHEMA, "version": ev.SCHEMA_VERSION}).encode() + b"\n" + data


LOADERS: dict[str, tuple[Callable[[Path], object], st.SearchStrategy[bytes]]] = {
    "models.toml": (load_models, st.one_of(contents, mutated(models_toml()))),
    "presets.toml": (load_presets, st.one_of(contents, mutated(presets_toml()))),
    "calibration file": (load_calibration, st.one_of(contents, mutated(calibration_toml()))),
    "dataset (JSONL)": (load_dataset, contents),
    "scripted turns": (load_script, contents),
    "trajectory": (load_trajectory, st.one_of(contents, contents.map(with_trajectory_header))),
    "trajectory for export": (load_export, st.one_of(contents, contents.map(with_trajectory_header))),
    "eval results": (load_results, contents),
    "eval manifest": (load_manifest, contents),
}


@pytest.mark.parametrize("name", list(LOADERS))
def test_a_loader_loads_or_says_what_is_wrong_in_one_line(name, tmp_path_factory):
    load, files = LOADERS[name]

    @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(files)
    def check(data: bytes) -> None:
        path = tmp_path_factory.mktemp("fuzz") / "file"
        path.write_bytes(data)
        try:
            load(path)
        except UserError as e:
            assert str(e).strip(), f"{type(e).__name__} with no message"
            if isinstance(e, ConfigError):
                assert e.fix, f"no fix line: {e}"

    check()
