"""Presets: named run specifications (tuiagent.core.run_spec: which guards, their settings, the
run budgets, sampling, mode and kernel), defined once and used by ``solve --preset``, ``tuiagent
--preset``, ``fork --preset``, ``eval -c``, compare columns and the app.

They come from the shipped ``tuiagent/presets.toml``, the user's ``<config dir>/presets.toml`` and,
for an eval, ``--configs FILE``, later ones winning; a model's calibration may define its own
``recommended``. ``parse_config`` reads the one setting grammar (``PARTS[:KEY=VALUE,...]``, see
tuiagent.core.run_spec) with these presets and the tool-use-tax conditions as its vocabulary. A
preset may only set guards it turns on. The file format and the grammar with examples:
docs/runs.md ("Presets").
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from tuiagent import paths, plugins, safe_read
from tuiagent.core.run_spec import RUN_KEYS, SAMPLING_KEYS, Grammar, RunSpec, assign, check_guards_on
from tuiagent.errors import ConfigError, UserError

CONDITIONS_GROUP = "tuiagent.conditions"


def conditions() -> dict[str, dict[str, Any]]:
    """The named run conditions the installed papers register under "tuiagent.conditions" (the
    tool-use tax's seven: guards/gstep/conditions.py): name -> the run keys it sets, each group's in
    its own order; words of the setting grammar and a preset's ``condition``."""
    found: dict[str, dict[str, Any]] = {}
    for group in plugins.names(CONDITIONS_GROUP):
        table: Any = plugins.load(CONDITIONS_GROUP, group, "conditions", error=ConfigError)
        found.update({name: dict(keys) for name, keys in table.items()})
    return found


@dataclass(frozen=True)
class Preset:
    """A named RunSpec (in an eval: one setting every problem is run under)."""

    name: str
    spec: RunSpec = field(default_factory=RunSpec)
    description: str = field(default="", compare=False)
    origin: str = field(default="", compare=False)  # the file that defined it ("" for a parsed string)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **self.spec.describe()}

    def fingerprint(self, base: dict[str, Any] | None = None) -> str:
        """A short hash of what the setting does (with the eval-wide ``base`` run settings)."""
        body = {k: v for k, v in self.describe().items() if k != "name"}
        body["base"] = base or {}
        blob = json.dumps(body, sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]


def _guard_names() -> list[str]:
    from guards.chain import available

    return available()


def grammar(named: dict[str, Preset] | None = None) -> Grammar:
    """The setting grammar (tuiagent.core.run_spec) with the installed guards, the conditions and ``named``."""
    return Grammar(_guard_names(), conditions(), {name: p.spec for name, p in (named or {}).items()})


FAITHFUL_SUFFIX = " (faithful)"


def faithful_preset(preset: Preset) -> Preset:
    """``preset`` under the paper profile (``eval --faithful``), named apart: it is another setting."""
    return Preset(name=preset.name + FAITHFUL_SUFFIX, spec=faithful(preset.spec))


def parse_config(text: str, named: dict[str, Preset] | None = None) -> Preset:
    """One setting string (``-c``, a compare column, ``--preset``) -> a Preset named ``text``; a name
    ending in " (faithful)" is that setting under the paper profile, as ``eval --faithful`` names it."""
    named = named or {}
    text = text.strip()
    if text in named:
        return named[text]
    if text.endswith(FAITHFUL_SUFFIX):
        return faithful_preset(parse_config(text.removesuffix(FAITHFUL_SUFFIX), named))
    return Preset(name=text, spec=grammar(named).parse(text))


# [ours] What `solve` and the app start with when no preset or guard is asked for. Measured on the
# default model (docs/evaluating.md): all guards 0.633 vs none 0.800 on 30 GSM8K problems, while the
# flag-only guards generate exactly what `none` generates (bench/results/determinism-after.json).
DEFAULT_PRESET = "recommended"


def shipped_presets_file() -> Path:
    return Path(str(resources.files("tuiagent") / "presets.toml"))


def user_presets_file() -> Path:
    return paths.config_dir() / "presets.toml"


PAPER_PRESET = "paper"


def paper_preset() -> Preset:
    """Every guard under its paper's reading wherever the project has a choice (``faithful``)."""
    spec = faithful(RunSpec(guards=("all",)))
    return Preset(
        name=PAPER_PRESET,
        spec=spec,
        description="every guard, each under its paper's (or reference code's) reading wherever tuiagent has a "
        "choice (`tuiagent guards --explain --preset paper` lists the choices of ours left)",
        origin="tuiagent (built from each guard's paper_reading)",
    )


def faithful(spec: RunSpec, inherited: Sequence[str] = ()) -> RunSpec:
    """``spec`` with the paper profile of the guards it turns on (or, when it names none, the
    ``inherited`` ones: a fork's parent's) under its own settings (``--faithful``): what it sets itself wins."""
    from guards.chain import paper_settings

    named = inherited if spec.guards is None else spec.guards
    on = _guard_names() if "all" in named else list(named)
    return RunSpec(guard_settings=paper_settings(on)).merged(spec)


def load_presets(
    extra: Path | str | None = None, *, model: str | None = None, models_file: Path | None = None
) -> dict[str, Preset]:
    """Every preset by name: the shipped ones (``paper`` among them), those of ``model``'s calibration
    file (its own ``recommended``), the user's, then ``extra``'s (later ones win)."""
    out = {**load_preset_file(shipped_presets_file()), PAPER_PRESET: paper_preset()}
    out.update(calibrated_presets(model, models_file))
    if user_presets_file().is_file():
        out.update(load_preset_file(user_presets_file()))
    if extra is not None:
        out.update(load_preset_file(extra))
    return out


def calibrated_presets(model: str | None, models_file: Path | None = None) -> dict[str, Preset]:
    """The presets in the calibration file of ``model`` (None: the default model), if it has one."""
    from tuiagent.config import load_models

    calibration = load_models(models_file).get(model).calibration
    return load_preset_file(calibration.file) if calibration is not None else {}


def find_preset(name: str, *, model: str | None = None, models_file: Path | None = None) -> Preset:
    """A named preset, or none, all or a guard's name (presets that need no definition);
    ``model``'s calibration file may define its own (its ``recommended``, say)."""
    presets = load_presets(model=model, models_file=models_file)
    if name in presets:
        return presets[name]
    try:
        return parse_config(name, presets)
    except UserError:
        if any(c in name for c in ":=+, "):  # a setting string: its own mistake says more
            raise
        raise ConfigError(
            f"no preset {name!r}; known: {', '.join(sorted(presets))}, none, all or a guard's name",
            key="--preset",
            fix="`tuiagent presets` lists them",
        ) from None


def _settings_table(value: Any, file: str, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(
            "must be a table of settings", file=file, key=key, fix=f"write it as [{key}] with key = value lines"
        )
    return value


def load_preset_file(path: Path | str) -> dict[str, Preset]:
    """The presets of one TOML file (``[presets.NAME]`` or ``[configs.NAME]`` tables)."""
    path = Path(path).expanduser()
    text = safe_read.read_text(path, limit=safe_read.CONFIG_BYTES, what="presets file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"not valid TOML: {e}", file=str(path), fix="correct the syntax at that line") from None
    table_name = "presets" if "presets" in data else "configs"
    tables = data.get(table_name)
    if not isinstance(tables, dict) or not tables:
        raise ConfigError(
            "no [presets.NAME] tables", file=str(path), fix='add e.g. [presets.strict] with guards = ["attc"]'
        )
    known_keys = {"guards", "condition", "run", "sampling", "guard_settings", "description"}
    guards_known = _guard_names()
    out = {}
    for name, table in tables.items():
        where = f"{table_name}.{name}"
        if not isinstance(table, dict):
            raise ConfigError("must be a table", file=str(path), key=where, fix=f"write it as [{where}] with its keys")
        unknown = set(table) - known_keys
        if unknown:
            raise ConfigError(
                f"unknown key(s) {', '.join(sorted(unknown))}",
                file=str(path),
                key=where,
                fix=f"use {', '.join(sorted(known_keys))}",
            )
        guards = table.get("guards", [])
        guards = [guards] if isinstance(guards, str) else guards
        if not isinstance(guards, list) or not all(isinstance(g, str) for g in guards):
            raise ConfigError(
                "must be a guard's name or a list of them", file=str(path), key=f"{where}.guards", fix='e.g. ["attc"]'
            )
        for g in guards:
            if g not in ("all", "none", *guards_known):
                raise ConfigError(
                    f"{g!r} is not an installed guard",
                    file=str(path),
                    key=f"{where}.guards",
                    fix=f"use all or one of {', '.join(guards_known)}",
                )
        guards = [g for g in guards if g != "none"]
        spec = RunSpec(guards=tuple(guards))
        condition = table.get("condition")
        if condition is not None:
            named = conditions()
            if not isinstance(condition, str) or condition not in named:
                raise ConfigError(
                    f"{condition!r} is not a condition",
                    file=str(path),
                    key=f"{where}.condition",
                    fix=f"use one of {', '.join(named) or 'none: no installed paper names one'}",
                )
            spec = spec.merged(RunSpec(run=named[condition], condition=condition))
        for section, keys in (("run", RUN_KEYS), ("sampling", SAMPLING_KEYS)):
            for key, value in _settings_table(table.get(section, {}), str(path), f"{where}.{section}").items():
                key = "turn_max_tokens" if (section, key) == ("sampling", "max_tokens") else key
                if key not in keys:
                    raise ConfigError(
                        f"unknown {section} setting {key!r}",
                        file=str(path),
                        key=f"{where}.{section}",
                        fix=f"use {', '.join(keys)}",
                    )
                spec = spec.merged(assign(key, value, f"{path}: {where}.{section}"))
        for guard, values in _settings_table(
            table.get("guard_settings", {}), str(path), f"{where}.guard_settings"
        ).items():
            values = _settings_table(values, str(path), f"{where}.guard_settings.{guard}")
            spec = spec.merged(RunSpec(guard_settings={guard: dict(values)}))
        check_guards_on(spec, f"{path}: {where}")
        out[name] = Preset(name=name, spec=spec, description=str(table.get("description", "")), origin=str(path))
    return out


def resolve_settings(
    configs: list[str],
    *,
    named: dict[str, Preset] | None = None,
    default: list[str] | None = None,
    added: tuple[str, ...] = (),
) -> list[Preset]:
    """The settings of an eval, in order, duplicates dropped: ``configs``, then ``added`` (a protocol's,
    ``eval.protocols``). None of either -> ``default`` (``none`` when not given)."""
    texts = list(configs) + [c for c in added if c not in configs]
    if not texts:
        texts = list(default or ["none"])
    out: dict[str, Preset] = {}
    for text in texts:
        setting = parse_config(text, named)
        out.setdefault(setting.name, setting)
    return list(out.values())


def given_spec(
    guard: list[str] | None, sets: list[str] | None, *, run: dict[str, Any], sampling: dict[str, Any]
) -> RunSpec:
    """What the command line gave, and nothing else: ``-g``, ``--set`` and the options not left at
    None (an option beats a ``--set`` of the same key); defaults stay unsaid, so a preset's values hold."""
    options = RunSpec(
        guards=tuple(guard) if guard else None,
        run={k: v for k, v in run.items() if v is not None},
        sampling={k: v for k, v in sampling.items() if v is not None},
    )
    return grammar().assignments(sets or [], "--set").merged(options)
