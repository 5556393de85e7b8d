"""Read models.toml files into a :class:`ModelRegistry`, with errors that name the file, key and fix.

Files, later ones winning: the shipped defaults (``tuiagent/models.toml``), the user's
``<config dir>/models.toml``, then an explicit ``--models FILE``. An entry with an id already seen
replaces the earlier entry whole; ``default`` is taken from the last file that sets it.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.resources
import importlib.resources.abc
import re
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuiagent import paths
from tuiagent.config.calibration import load_calibration, merge_guards
from tuiagent.config.spec import BACKENDS, CHAT_TEMPLATES, SOURCE_KINDS, KernelCaps, ModelSpec, Source
from tuiagent.errors import ConfigError
from tuiagent.protocol import Sampling
from tuiagent.safe_read import CONFIG_BYTES, read_text

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def shipped_models_file() -> importlib.resources.abc.Traversable:
    """The models.toml shipped inside the package (a symlink to the repository's in a checkout)."""
    return importlib.resources.files("tuiagent") / "models.toml"


# ---------------------------------------------------------------- field rules (the whole schema)


@dataclass(frozen=True)
class _Rule:
    type: str  # "str" | "int" | "float" | "table" | "str_list"
    required: bool = False
    choices: tuple[str, ...] = ()
    check: Callable[[Any], str | None] | None = None  # returns a complaint, or None when fine


def _positive(v: Any) -> str | None:
    return None if v > 0 else f"must be greater than 0 (got {v})"


def _non_negative(v: Any) -> str | None:
    return None if v >= 0 else f"must be 0 or more (got {v})"


def _unit(v: Any) -> str | None:
    return None if 0 < v <= 1 else f"must be in (0, 1] (got {v})"


def _sha256(v: Any) -> str | None:
    return None if re.fullmatch(r"[0-9a-fA-F]{64}", v) else "must be 64 hexadecimal digits"


def _non_empty(v: Any) -> str | None:
    return None if v else "must not be empty"


def _distinct_urls(v: tuple[str, ...]) -> str | None:
    if not v or not all(v):
        return "must list at least one non-empty URL"
    return "lists a URL twice" if len(set(v)) != len(v) else None


_MODEL_RULES = {
    "backend": _Rule("str", required=True, choices=BACKENDS),
    "description": _Rule("str"),
    "context_size": _Rule("int", check=_positive),
    "chat_template": _Rule("str", choices=CHAT_TEMPLATES),
    "tokenizer": _Rule("str", check=_non_empty),
    "source": _Rule("table", required=True),
    "sampling": _Rule("table"),
    "guards": _Rule("table"),
    "options": _Rule("table"),
    "calibration": _Rule("str", check=_non_empty),
}

_SOURCE_RULES = {
    "kind": _Rule("str", required=True, choices=SOURCE_KINDS),
    "path": _Rule("str"),
    "packages": _Rule("str_list", check=_non_empty),
    "files": _Rule("str_list", check=_non_empty),
    "pip": _Rule("str_list"),
    "extra": _Rule("str", check=_non_empty),
    "sha256": _Rule("str", check=_sha256),
    "size": _Rule("int", check=_positive),
    "filename": _Rule("str", check=_non_empty),
    "repo": _Rule("str", check=_non_empty),
    "revision": _Rule("str", check=_non_empty),
    "base_url": _Rule("str", check=_non_empty),
    "base_urls": _Rule("str_list", check=_distinct_urls),
    "served_model": _Rule("str", check=_non_empty),
    "api_key_env": _Rule("str"),
}

# kind -> (required keys, optional keys), besides "kind"
_SOURCE_KEYS = {
    "pypi_chunks": ({"packages", "files", "size", "sha256"}, {"pip", "extra"}),
    "package_file": ({"packages", "files"}, {"size", "sha256", "pip", "extra"}),
    "path": ({"path"}, set()),
    "hub": ({"repo"}, {"filename", "revision"}),
    "server": (set(), {"base_url", "base_urls", "served_model", "api_key_env"}),  # one of base_url(s)
    "script": (set(), {"path"}),
}

_BACKEND_SOURCES = {
    "llama_cpp": ("pypi_chunks", "package_file", "path", "hub"),
    "vllm": ("pypi_chunks", "package_file", "path", "hub"),
    "openai": ("server",),
    "scripted": ("script",),
}

_SAMPLING_CHECKS = {
    "temperature": _non_negative,
    "top_p": _unit,
    "top_k": _non_negative,
    "repeat_penalty": _positive,
    "max_tokens": _positive,
}
_SAMPLING_RULES = {
    f.name: _Rule("float" if isinstance(f.default, float) else "int", check=_SAMPLING_CHECKS.get(f.name))
    for f in dataclasses.fields(Sampling)
}

_TYPE_NAMES = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "table": "a table",
    "str_list": "a list of strings",
}


_VALUE_NAMES = {bool: "a boolean", str: "a string", int: "an integer", float: "a number", list: "a list"}


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "a table"
    return f"{_VALUE_NAMES.get(type(value), type(value).__name__)} ({value!r})"


def toml_key(model_id: str) -> str:
    """``models.<id>`` as it would be written in TOML (ids with dots are quoted)."""
    return f"models.{model_id}" if re.fullmatch(r"[A-Za-z0-9_-]+", model_id) else f'models."{model_id}"'


def _coerce(value: Any, type_: str) -> tuple[bool, Any]:
    """(ok, value converted to what the dataclasses hold)."""
    if isinstance(value, bool):
        return False, value
    if type_ == "str":
        return isinstance(value, str), value
    if type_ == "int":
        return isinstance(value, int), value
    if type_ == "float":
        return isinstance(value, int | float), float(value) if isinstance(value, int | float) else value
    if type_ == "table":
        return isinstance(value, dict), value
    if type_ == "str_list":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return ok, tuple(value) if ok else value
    raise AssertionError(type_)


class _Table:
    """Validates one TOML table against rules; every error names the file and the dotted key."""

    def __init__(self, file: str, prefix: str):
        self.file, self.prefix = file, prefix

    def error(self, key: str | None, problem: str, fix: str) -> ConfigError:
        dotted = f"{self.prefix}.{key}" if key else self.prefix
        return ConfigError(problem, file=self.file, key=dotted, fix=fix)

    def read(self, table: Any, rules: dict[str, _Rule], allowed: set[str] | None = None) -> dict[str, Any]:
        if not isinstance(table, dict):
            raise self.error(None, f"expected a table, got {_describe(table)}", f"write it as [{self.prefix}]")
        allowed = set(rules) if allowed is None else allowed
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, sorted(allowed), n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                raise self.error(
                    key, "unknown key", f"{hint}remove or rename it; allowed here: {', '.join(sorted(allowed))}"
                )
        out: dict[str, Any] = {}
        for key, rule in rules.items():
            if key not in allowed:
                continue
            if key not in table:
                if rule.required:
                    raise self.error(key, "missing required key", f"add {key} = ... to [{self.prefix}]")
                continue
            ok, value = _coerce(table[key], rule.type)
            if not ok:
                raise self.error(
                    key,
                    f"expected {_TYPE_NAMES[rule.type]}, got {_describe(table[key])}",
                    f"write {key} as {_TYPE_NAMES[rule.type]}",
                )
            if rule.choices and value not in rule.choices:
                close = difflib.get_close_matches(value, rule.choices, n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                raise self.error(key, f"unknown value {value!r}", f"{hint}use one of: {', '.join(rule.choices)}")
            if rule.check and (complaint := rule.check(value)):
                raise self.error(key, complaint, f"fix the value of {key}")
            out[key] = value
        return out


# ---------------------------------------------------------------- one entry


def _absolute(path: str, file: str) -> str:
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = Path(file).parent / p
    return str(p)


def _calibration_file(path: str, file: str, prefix: str) -> str:
    """A model's calibration file: relative to its models.toml, or else one shipped with tuiagent under
    that name, so a copy of the shipped models.toml (``--models``) still finds the shipped calibrations."""
    beside = _absolute(path, file)
    if Path(beside).is_file() or Path(path).expanduser().is_absolute():
        return beside
    shipped = importlib.resources.files("tuiagent") / path
    if shipped.is_file():
        return str(shipped)
    raise ConfigError(
        f"calibration file not found: {beside} (nor {shipped} among the shipped files)",
        file=file,
        key=f"{prefix}.calibration",
        fix=f"give the file's path, absolute or relative to {Path(file).parent}, or remove the key; "
        f"`tuiagent calibrate MODEL` writes a new one to {paths.config_dir() / 'calibration'}",
    )


def _parse_source(raw: Any, model_id: str, backend: str, file: str) -> Source:
    t = _Table(file, f"{toml_key(model_id)}.source")
    if "kind" not in raw:  # raw is a table: the model rules checked that
        raise t.error("kind", "missing required key", f"add kind = one of: {', '.join(SOURCE_KINDS)}")
    kind = t.read(raw, {"kind": _SOURCE_RULES["kind"]}, allowed=set(raw))["kind"]
    required, optional = _SOURCE_KEYS[kind]
    rules = {k: dataclasses.replace(r, required=k in required) for k, r in _SOURCE_RULES.items()}
    values = t.read(raw, rules, allowed={"kind"} | required | optional)

    if kind not in _BACKEND_SOURCES[backend]:
        raise t.error(
            "kind",
            f"the {backend} backend cannot use a source of kind {kind!r}",
            f"use one of: {', '.join(_BACKEND_SOURCES[backend])}",
        )
    if kind in ("pypi_chunks", "package_file"):
        n_pkg, n_files = len(values["packages"]), len(values["files"])
        if kind == "package_file" and (n_pkg, n_files) != (1, 1):
            raise t.error("packages", "package_file takes one package and one file", "list one name in each")
        if n_pkg != n_files:
            raise t.error(
                "files", f"{n_pkg} packages but {n_files} files", "give one file per package, in the same order"
            )
    if kind == "hub" and backend == "llama_cpp" and "filename" not in values:
        raise t.error("filename", "llama_cpp needs one GGUF file from the repo", 'add filename = "<name>.gguf"')
    if kind == "server" and ("base_url" in values) == ("base_urls" in values):
        raise t.error(
            "base_url",
            "a server source needs base_url or base_urls (one of them)",
            'add base_url = "http://HOST:PORT/v1", or base_urls = ["http://A/v1", "http://B/v1"]',
        )
    if kind == "path" and not values["path"]:
        raise t.error("path", "must not be empty", "give the model's file (or directory, for vllm)")
    if "path" in values:  # "" (a script given at run time) becomes None
        values["path"] = _absolute(values["path"], file) if values["path"] else None
    if "sha256" in values:
        values["sha256"] = values["sha256"].lower()
    return Source(**values)


def _parse_model(model_id: str, raw: Any, file: str) -> ModelSpec:
    prefix = toml_key(model_id)
    t = _Table(file, prefix)
    if not _ID.match(model_id):
        raise t.error(
            None, f"model id {model_id!r} has characters that are not allowed", "use letters, digits, '.', '_', '-'"
        )
    values = t.read(raw, _MODEL_RULES)
    values["source"] = _parse_source(values["source"], model_id, values["backend"], file)
    if "sampling" in values:
        values["sampling"] = Sampling(**_Table(file, f"{prefix}.sampling").read(values["sampling"], _SAMPLING_RULES))
    for name, settings in values.get("guards", {}).items():
        if not isinstance(settings, dict):
            raise t.error(
                f"guards.{name}",
                f"expected a table, got {_describe(settings)}",
                f"write it as [{prefix}.guards.{name}]",
            )
    if "calibration" in values:  # fitted guard values, below the model's own [guards] tables
        values["calibration"] = load_calibration(_calibration_file(values["calibration"], file, prefix))
        values["guards"] = merge_guards(values["calibration"].guards, values.get("guards", {}))
    return ModelSpec(id=model_id, origin=file, **values)


# ---------------------------------------------------------------- files and the registry


_KERNEL_RULES = {key: _Rule("int", check=_positive) for key in ("disk_mb", "files", "tasks")}


def _parse_file(text: str, file: str) -> tuple[dict[str, ModelSpec], str | None, dict[str, int]]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:  # the message carries "(at line L, column C)"
        raise ConfigError(f"not valid TOML: {e}", file=file, fix="correct the syntax at that line") from None
    top = _Table(file, "")
    for key in data:
        if key not in ("default", "models", "kernel"):
            close = difflib.get_close_matches(key, ["default", "models", "kernel"], n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise ConfigError(
                "unknown top-level key",
                file=file,
                key=key,
                fix=f"{hint}only 'default', [kernel] and [models.<id>] tables belong here",
            )
    default = data.get("default")
    if default is not None and not isinstance(default, str):
        raise ConfigError(
            f"expected a string, got {_describe(default)}", file=file, key="default", fix='write default = "<model id>"'
        )
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise top.error(None, "'models' must be a table of tables", "write each model as [models.<id>]")
    kernel = _Table(file, "kernel").read(data["kernel"], _KERNEL_RULES) if "kernel" in data else {}
    return {mid: _parse_model(mid, raw, file) for mid, raw in models.items()}, default, kernel


class ModelRegistry:
    """The models known after reading every file; iterate for the specs in file order."""

    def __init__(self, models: dict[str, ModelSpec], default: str, files: tuple[str, ...]):
        self._models, self.default, self.files = models, default, files

    def get(self, model_id: str | None = None) -> ModelSpec:
        """The spec for ``model_id`` (the default when None); unknown ids raise ConfigError."""
        model_id = self.default if model_id is None else model_id
        try:
            return self._models[model_id]
        except KeyError:
            close = difflib.get_close_matches(model_id, list(self._models), n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise ConfigError(
                f"unknown model {model_id!r}",
                fix=f"{hint}known models: {', '.join(self._models)}; "
                f"or add [models.{model_id}] to {paths.user_models_file()}",
            ) from None

    def origin_of(self, model_id: str) -> str:
        """The file that defined ``model_id`` (the last one to, when several did)."""
        return self.get(model_id).origin

    def ids(self) -> list[str]:
        return list(self._models)

    def __iter__(self) -> Iterator[ModelSpec]:
        return iter(self._models.values())

    def __len__(self) -> int:
        return len(self._models)

    def __contains__(self, model_id: object) -> bool:
        return model_id in self._models

    def __repr__(self) -> str:
        return f"ModelRegistry(default={self.default!r}, models={self.ids()!r})"


# [ours] A process reads its models files once: the registry is kept with the state of every file it
# came from (each models file, present or not, and each calibration file an entry names) and read
# again only when one of them changed, so a run, its guards, presets and judges share one read and
# an edit between two runs of the app is still seen.
_READ: dict[tuple[str, ...], tuple[tuple[tuple[str, tuple[int, ...] | None], ...], ModelRegistry]] = {}


def _state(path: str) -> tuple[str, tuple[int, ...] | None]:
    try:
        st = Path(path).stat()
    except OSError:
        return path, None
    return path, (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)


def load_models(user_file: Path | str | None = None) -> ModelRegistry:
    """Read the shipped models.toml, then ``<config dir>/models.toml`` if present, then ``user_file``
    (the ``--models`` option; it must exist). Kept while none of the files it read changes."""
    files = (str(shipped_models_file()), str(paths.user_models_file()))
    key = (*files, str(Path(user_file).expanduser()) if user_file is not None else "")
    held = _READ.get(key)
    if held is not None and all(_state(seen[0]) == seen for seen in held[0]):
        return held[1]
    before = [_state(path) for path in key if path]  # taken first: a file changed while it is read is read again
    registry = _read_models(user_file)
    calibrations = {spec.calibration.file for spec in registry if spec.calibration is not None}
    _READ[key] = ((*before, *map(_state, sorted(calibrations))), registry)
    return registry


def _read_models(user_file: Path | str | None) -> ModelRegistry:
    shipped = shipped_models_file()
    try:
        sources: list[tuple[str, str]] = [(str(shipped), shipped.read_text(encoding="utf-8"))]  # our own file
    except OSError as e:
        raise ConfigError(
            f"the shipped models.toml cannot be read ({e})",
            file=str(shipped),
            fix="reinstall tuiagent (pip install --force-reinstall tuiagent)",
        ) from None

    candidates = [(paths.user_models_file(), False)]
    if user_file is not None:
        candidates.append((Path(user_file).expanduser(), True))
    for path, explicit in candidates:
        if not path.exists():
            if explicit:
                raise ConfigError("models file not found", file=str(path), fix="check the path given with --models")
            continue
        text = read_text(path, limit=CONFIG_BYTES, what="models file", fix="give a regular UTF-8 TOML file")
        sources.append((str(path.resolve()), text))

    models: dict[str, ModelSpec] = {}
    default, default_file = None, None
    caps: dict[str, int] = {}
    for file, text in sources:
        entries, file_default, file_caps = _parse_file(text, file)
        models.update(entries)  # a redefined id replaces the earlier entry whole, keeping its place
        caps.update(file_caps)  # [kernel] key by key: a later file's value wins
        if file_default is not None:
            default, default_file = file_default, file
    if default is None:
        raise ConfigError(
            "no default model is set", file=sources[-1][0], key="default", fix='add default = "<model id>"'
        )
    if default not in models:
        raise ConfigError(
            f"the default model {default!r} is not defined",
            file=default_file,
            key="default",
            fix=f"set default to one of: {', '.join(models)}; or define [models.{default}]",
        )
    kernel_caps = KernelCaps(**caps)
    models = {mid: dataclasses.replace(spec, kernel_caps=kernel_caps) for mid, spec in models.items()}
    return ModelRegistry(models, default, tuple(f for f, _ in sources))
