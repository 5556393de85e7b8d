"""Presets: named guard settings (which guards, their settings, and the run budgets and sampling
they need), defined once and used by ``solve --preset``, ``eval -c``, compare columns and the app.

They come from the shipped ``tuiagent/presets.toml``, the user's ``<config dir>/presets.toml`` and,
for an eval, ``--configs FILE``, later ones winning; a model's calibration may define its own
``recommended``. ``parse_config`` reads the one-string form ``PARTS[:KEY=VALUE,...]`` (guard
names, ``all``, ``none``, a tool-use-tax condition or a preset name, then guard, run or sampling
settings). A preset may only set guards it turns on. The file format and the grammar with
examples: docs/runs.md ("Presets").
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from tuiagent import paths
from tuiagent.errors import ConfigError, UserError

# The seven tool-use-tax conditions (arXiv 2605.00136, section 2.2), as changes to a run, in the
# paper's order; what each one is here: docs/evaluating.md#the-tool-use-tax-protocol.
CONDITIONS: dict[str, dict[str, Any]] = {
    "cot": {"mode": "cot"},
    "fcstyle": {"mode": "fcstyle"},  # the tool prompt, no tool access
    "noop": {"kernel": "noop"},
    "full": {},
    "oracle": {"kernel": "oracle"},
    "evidence": {"evidence": "oracle"},  # the question without its distractor
    "max1": {"max_tool_calls": 1},
}
CONDITION_LABELS = {
    "cot": "NoTool-CoT",
    "fcstyle": "NoTool-FCStyle",
    "noop": "Agent-NoopTool",
    "full": "Agent-Full",
    "oracle": "Agent-OracleCalc",
    "evidence": "Agent-OracleEvidence",
    "max1": "Agent-Max1Turn",
}
PROTOCOLS = {"tooltax": ("full", "cot", "fcstyle", "noop", "oracle", "evidence", "max1"),
             # [ours] PruneTIR's ablation rows (report: eval/prunetir_analysis.py): the base with the budget
             # PruneTIR declares with its defaults (run_budget: retry_limit x (turn_limit + 1) + 1 = 9 calls),
             # so every row has the same calls to spend; the full method; each component off [paper].
             "prunetir-ablation": ("none:max_tool_calls=9", "prunetir", "prunetir:prunetir.stp=false",
                                   "prunetir:prunetir.stpr=false", "prunetir:prunetir.rtts=false"),
             # [paper] TIM (arXiv 2511.10899): Base (no tool), TaLM, TaLM + Prompting (section 6.1; presets.toml)
             "tim": ("cot", "full", "tim-prompt")}
MODES = ("tool", "cot", "fcstyle")

RUN_KEYS = {"mode": str, "kernel": str, "evidence": str, "max_tool_calls": int, "max_tokens": int, "exec_timeout_s": float,
            "output_chars": int, "max_wall_s": float}
SAMPLING_KEYS = {"temperature": float, "top_p": float, "top_k": int, "repeat_penalty": float}


@dataclass(frozen=True)
class Preset:
    """Named settings for a run (in an eval: one setting every problem is run under). ``run``
    overrides RunSettings fields (``mode`` and the budgets) and may name the ``kernel``;
    ``sampling`` overrides the model's sampling."""

    name: str
    guards: tuple[str, ...] = ()
    guard_settings: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)
    run: dict[str, Any] = field(default_factory=dict, hash=False)
    sampling: dict[str, Any] = field(default_factory=dict, hash=False)
    condition: str | None = None  # a tool-use-tax condition this setting is, when it is one
    description: str = field(default="", compare=False)
    origin: str = field(default="", compare=False)  # the file that defined it ("" for a parsed string)

    @property
    def mode(self) -> str:
        return str(self.run.get("mode", "tool"))

    @property
    def kernel(self) -> str:
        return str(self.run.get("kernel", "jupyter"))

    @property
    def evidence(self) -> str:
        """"oracle": a distractor variant is run on its clean question (Agent-OracleEvidence)."""
        return str(self.run.get("evidence", "as written"))

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "guards": list(self.guards), "guard_settings": self.guard_settings,
                "run": self.run, "sampling": self.sampling, "condition": self.condition}

    def fingerprint(self, base: dict[str, Any] | None = None) -> str:
        """A short hash of what the setting does (with the eval-wide ``base`` run settings)."""
        body = {k: v for k, v in self.describe().items() if k != "name"}
        body["base"] = base or {}
        blob = json.dumps(body, sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]


def _convert(key: str, value: Any, kind: type, origin: str) -> Any:
    if kind is str:
        value = str(value)
        if key == "mode" and value not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}, not {value!r}", key=origin)
        if key == "evidence" and value != "oracle":
            raise ConfigError(f"evidence can only be oracle, not {value!r}", key=origin)
        return value
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be a number, not {value!r}", key=origin) from None
    if number < 0:
        raise ConfigError(f"{key} must be 0 or more, not {value!r}", key=origin)
    return number


def _assign(setting: dict[str, Any], key: str, value: Any, origin: str) -> None:
    if "." in key:
        guard, _, name = key.partition(".")
        setting["guard_settings"].setdefault(guard, {})[name] = value
    elif key in RUN_KEYS:
        setting["run"][key] = _convert(key, value, RUN_KEYS[key], origin)
    elif key in SAMPLING_KEYS:
        setting["sampling"][key] = _convert(key, value, SAMPLING_KEYS[key], origin)
    else:
        known = ", ".join([*RUN_KEYS, *SAMPLING_KEYS])
        raise ConfigError(f"unknown setting {key!r}", key=origin,
                          fix=f"use GUARD.KEY=VALUE for a guard setting, or one of: {known}")


def _guard_names() -> list[str]:
    from guards.chain import available

    return available()


def _check_settings_are_for_guards_on(guards: list[str], guard_settings: dict[str, Any], where: str) -> None:
    """A setting for a guard the config does not turn on would be silently ignored: refuse it."""
    off = sorted(g for g in guard_settings if g not in guards and "all" not in guards)
    if off:
        raise ConfigError(f"{where} sets {', '.join(off)}, which it does not turn on",
                          fix=f"add {'+'.join(off)} to its guards, or drop the setting")


def parse_config(text: str, named: dict[str, Preset] | None = None) -> Preset:
    """One ``--config`` string (see the module docstring) -> an Preset named ``text``."""
    named = named or {}
    text = text.strip()
    if not text:
        raise ConfigError("an empty --config", fix="e.g. --config none, --config attc+prunetir")
    if text in named:
        return named[text]
    head, colon, tail = text.partition(":")
    parts = [p.strip() for p in head.split("+") if p.strip()]
    guards_known = _guard_names()
    setting: dict[str, Any] = {"guards": [], "guard_settings": {}, "run": {}, "sampling": {}}
    conditions = []
    for part in parts:
        if part == "none":
            continue
        if part == "all":
            setting["guards"].append("all")
        elif part in CONDITIONS:
            conditions.append(part)
            setting["run"].update(CONDITIONS[part])
        elif part in guards_known:
            setting["guards"].append(part)
        else:
            choices = ", ".join(["none", "all", *guards_known, *CONDITIONS, *named])
            raise ConfigError(f"--config {text!r}: {part!r} is not a guard, a condition or a named config",
                              fix=f"use one of: {choices} (join with +)")
    if len(conditions) > 1:
        raise ConfigError(f"--config {text!r} names more than one condition ({', '.join(conditions)})",
                          fix=f"give one of {', '.join(CONDITIONS)} per config")
    if colon:
        for item in tail.split(","):
            key, eq, value = item.partition("=")
            if not (eq and key.strip()):
                raise ConfigError(f"--config {text!r}: {item!r} is not KEY=VALUE",
                                  fix="e.g. attc+prunetir:attc.threshold=0.9,max_tool_calls=6")
            _assign(setting, key.strip(), value.strip(), f"--config {text}")
    _check_settings_are_for_guards_on(setting["guards"], setting["guard_settings"], f"--config {text!r}")
    condition = conditions[0] if conditions else ("full" if text in ("none", "full") else None)
    return Preset(name=text, guards=tuple(dict.fromkeys(setting["guards"])),
                       guard_settings=setting["guard_settings"], run=setting["run"], sampling=setting["sampling"],
                       condition=condition if not setting["guards"] else None)


# [ours] What `solve` and the app start with when no preset or guard is asked for. Measured on the
# default model (docs/evaluating.md): all guards 0.633 vs none 0.800 on 30 GSM8K problems, while the
# flag-only guards generate exactly what `none` generates (bench/results/determinism-after.json).
DEFAULT_PRESET = "recommended"


def shipped_presets_file() -> Path:
    return Path(str(resources.files("tuiagent") / "presets.toml"))


def user_presets_file() -> Path:
    return paths.config_dir() / "presets.toml"


def load_presets(extra: Path | str | None = None, *, model: str | None = None,
                 models_file: Path | None = None) -> dict[str, Preset]:
    """Every preset by name: the shipped ones, those of ``model``'s calibration file (its own
    ``recommended``), the user's, then ``extra``'s (later ones win)."""
    out = load_preset_file(shipped_presets_file())
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
        raise ConfigError(f"no preset {name!r}; known: {', '.join(sorted(presets))}, none, all or a guard's name",
                          key="--preset", fix="`tuiagent presets` lists them") from None


def load_preset_file(path: Path | str) -> dict[str, Preset]:
    """The presets of one TOML file (``[presets.NAME]`` or ``[configs.NAME]`` tables)."""
    path = Path(path).expanduser()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read presets file: {e.strerror}", file=str(path)) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"not valid TOML: {e}", file=str(path)) from None
    table_name = "presets" if "presets" in data else "configs"
    tables = data.get(table_name)
    if not isinstance(tables, dict) or not tables:
        raise ConfigError("no [presets.NAME] tables", file=str(path),
                          fix='add e.g. [presets.strict] with guards = ["attc"]')
    known_keys = {"guards", "condition", "run", "sampling", "guard_settings", "description"}
    guards_known = _guard_names()
    out = {}
    for name, table in tables.items():
        where = f"{table_name}.{name}"
        if not isinstance(table, dict):
            raise ConfigError("must be a table", file=str(path), key=where)
        unknown = set(table) - known_keys
        if unknown:
            raise ConfigError(f"unknown key(s) {', '.join(sorted(unknown))}", file=str(path), key=where,
                              fix=f"use {', '.join(sorted(known_keys))}")
        guards = table.get("guards", [])
        guards = [guards] if isinstance(guards, str) else list(guards)
        for g in guards:
            if g not in ("all", "none", *guards_known):
                raise ConfigError(f"{g!r} is not an installed guard", file=str(path), key=f"{where}.guards",
                                  fix=f"use all or one of {', '.join(guards_known)}")
        guards = [g for g in guards if g != "none"]
        setting: dict[str, Any] = {"guards": guards, "guard_settings": {}, "run": {}, "sampling": {}}
        condition = table.get("condition")
        if condition is not None:
            if condition not in CONDITIONS:
                raise ConfigError(f"{condition!r} is not a condition", file=str(path), key=f"{where}.condition",
                                  fix=f"use one of {', '.join(CONDITIONS)}")
            setting["run"].update(CONDITIONS[condition])
        for key, value in dict(table.get("run", {})).items():
            if key not in RUN_KEYS:
                raise ConfigError(f"unknown run setting {key!r}", file=str(path), key=f"{where}.run",
                                  fix=f"use {', '.join(RUN_KEYS)}")
            _assign(setting, key, value, f"{path}: {where}.run")
        for key, value in dict(table.get("sampling", {})).items():
            if key not in SAMPLING_KEYS:
                raise ConfigError(f"unknown sampling setting {key!r}", file=str(path), key=f"{where}.sampling",
                                  fix=f"use {', '.join(SAMPLING_KEYS)}")
            _assign(setting, key, value, f"{path}: {where}.sampling")
        for guard, values in dict(table.get("guard_settings", {})).items():
            if not isinstance(values, dict):
                raise ConfigError("must be a table of settings", file=str(path), key=f"{where}.guard_settings.{guard}")
            setting["guard_settings"][guard] = dict(values)
        _check_settings_are_for_guards_on(guards, setting["guard_settings"], f"{path}: {where}")
        out[name] = Preset(name=name, guards=tuple(guards), guard_settings=setting["guard_settings"],
                           run=setting["run"], sampling=setting["sampling"],
                           condition=condition if condition and not guards else None,
                           description=str(table.get("description", "")), origin=str(path))
    return out


def resolve_settings(configs: list[str], *, named: dict[str, Preset] | None = None,
                     default: list[str] | None = None, protocol: str | None = None) -> list[Preset]:
    """The settings of an eval, in order, duplicates dropped. No config at all -> ``default``
    (``none`` when not given)."""
    texts = list(configs)
    if protocol:
        if protocol not in PROTOCOLS:
            raise ConfigError(f"unknown protocol {protocol!r}", fix=f"use one of {', '.join(PROTOCOLS)}")
        texts += [c for c in PROTOCOLS[protocol] if c not in texts]
    if not texts:
        texts = list(default or ["none"])
    out: dict[str, Preset] = {}
    for text in texts:
        setting = parse_config(text, named)
        out.setdefault(setting.name, setting)
    return list(out.values())

