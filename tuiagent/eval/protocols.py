"""A paper's evaluation protocol as a plug-in: what ``--protocol`` adds to an eval, what its judge
does after the runs, and what the report shows of it.

Protocols register under the ``tuiagent.protocols`` entry point (the shipped ones in pyproject.toml,
a plug-in's in its own dist-info); the harness, the report and the CLI know them only through
:func:`installed`. A protocol class sets ``name``, ``title`` and ``order`` (where its tables stand in
the report) and overrides what it has:

- ``settings``: the ``--protocol`` values it answers to, each with the settings it adds (``-c`` texts);
  ``switches``: the values that turn a part of it on instead (``--protocol cues:cue=cell+code``), each
  read by ``configure`` into its options (``cfg.options[name]``), checked by ``check`` before any run,
  recorded by ``manifest``, and with ``--report-only`` done over the stored runs by ``stored``;
  ``made_by``: the eval options that make its runs where no value does (``--inject``);
- ``sections(data)``: its part of a dataset's summary, by key (``None`` where it has nothing to say);
- ``tables``, ``notes``, ``plots``, ``files``: its forms, read back from the summary;
- ``judge(pass_)``: its judging pass after the runs (with ``--judge``), cached in judgements.jsonl;
  ``judges(cfg)`` says whether it asks anything, ``advise(cfg)`` gives notes before the runs;
- ``variants``, ``added_settings`` and ``skips``: the problems' variants it adds (cued questions,
  injected faults), the settings its runs need, and the runs that would say nothing;
  ``written_variants``: variants a model writes before the runs (the tool-use tax's distractors).

CONTRIBUTING.md walks through writing one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from tuiagent import plugins
from tuiagent.errors import ConfigError

if TYPE_CHECKING:
    from tuiagent.core.judge import JudgeModels
    from tuiagent.core.judge_store import JudgementStore
    from tuiagent.eval.datasets import Problem
    from tuiagent.eval.harness import EvalConfig
    from tuiagent.eval.results import ResultStore
    from tuiagent.presets import Preset

GROUP = "tuiagent.protocols"

Table = tuple[str, list[str], list[list[str]]]  # (title, header, rows)
Record = dict[str, Any]


def cell(value: Any) -> str:
    """A number, interval or missing value as a report cell shows it."""
    if value is None:
        return "–"
    if isinstance(value, list):
        return "–" if None in value else f"{cell(value[0])} … {cell(value[1])}"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


@dataclass(frozen=True)
class EvalData:
    """What a report is made from: one eval's records and how its settings were described."""

    records: list[Record]  # every run of the eval, every dataset and variant
    settings: list[str]  # the setting names, in the report's order
    baseline: str | None
    conditions: Mapping[str, str | None] = field(default_factory=dict)  # a setting's tool-use-tax condition
    modes: Mapping[str, str] = field(default_factory=dict)  # tool, cot, fcstyle
    guards: Mapping[str, list[str]] = field(default_factory=dict)
    specs: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # each setting as the manifest has it
    judgements: JudgementStore | None = None
    judge: str | None = None  # the eval's judge (--judge)
    protocols: frozenset[str] = frozenset()  # the --protocol values the eval ran with
    manifest: Mapping[str, Any] = field(default_factory=dict)  # the directory's, what protocols recorded


@dataclass(frozen=True)
class DatasetData:
    """One dataset of an eval: its records (variants included) and its clean runs per setting."""

    name: str
    eval: EvalData
    records: list[Record]
    clean: dict[str, list[Record]]
    row: Callable[[list[Record], list[Record] | None], dict[str, Any]]  # the report's per-setting row


@dataclass(frozen=True)
class Switch:
    """A ``--protocol`` value that turns a part of a protocol on: what it does, and the keys it takes
    after a colon (``--protocol cues:cue=cell+code``; several values of a key joined by ``+``)."""

    help: str
    keys: Mapping[str, str] = field(default_factory=dict)  # key -> what it sets


@dataclass(frozen=True)
class StoredPass:
    """What a protocol's work over an eval directory's stored runs (``--report-only``) may use."""

    directory: Path
    options: Mapping[str, Any]  # the protocol's own, from its switches
    judge: str | None
    models_file: Path | None
    log: Callable[[str], None]
    concurrency: int = 1


@dataclass
class VariantPass:
    """What a protocol that has a model write its variants before the runs may use."""

    cfg: EvalConfig
    model_id: str  # the model under test
    # a model id (None: the eval's own) -> (a factory of its backend, whether to close it after, its id);
    # the eval's own model is the one its runs share, opened once on first need
    backend: Callable[[str | None], tuple[Callable[[], Any], bool, str]]
    log: Callable[[str], None]
    on_progress: Callable[[int, int], None] | None = None
    left_out: list[dict[str, Any]] = field(default_factory=list)  # {dataset, id, variant, why, ...}: reported
    notes: dict[str, Any] = field(default_factory=dict)  # what it records in the directory's manifest


@dataclass
class JudgePass:
    """What a protocol's judging pass after the runs may use."""

    cfg: EvalConfig
    store: ResultStore
    described: dict[str, dict[str, Any]]  # every setting the directory reports, earlier sessions' too
    protocols: frozenset[str]
    models: JudgeModels
    log: Callable[[str], None]


@dataclass(frozen=True)
class InjectedRuns:
    """One setting's runs under one injected fault (``--inject``, eval.faults_report), each paired with
    the clean run of the same problem and seed; ``baseline``: the baseline setting's runs under the same
    fault by (problem id, seed), None when this setting is the baseline or there is none."""

    kind: str  # the fault's kind: wrong_number, error, timeout, ...
    pairs: Sequence[tuple[Record, Record]]
    baseline: Mapping[tuple[str, int], Record] | None = None


# A row of the injected-faults section as a paper's hooks see it: (setting, fault label, the row).
FaultRow = tuple[str, str, dict[str, Any]]


class EvalProtocol:
    """The base of every protocol: each hook does nothing until a protocol overrides it."""

    name: ClassVar[str]
    title: ClassVar[str]  # one line: the paper and what its protocol measures
    order: ClassVar[int] = 100
    settings: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    switches: ClassVar[Mapping[str, Switch]] = {}
    same_in_shards: ClassVar[tuple[str, ...]] = ()  # manifest keys every shard of one eval must agree on
    # manifest keys naming a judge of its own (one that judged the stored runs later, --report-only):
    # the report opens the judgements for it and says what it cost beside the eval's judge
    judge_keys: ClassVar[tuple[str, ...]] = ()
    made_by: ClassVar[str] = ""  # the eval options that produce its runs, where no --protocol value does
    judge_use: ClassVar[str] = ""  # what its judging pass asks, and with which options (for the eval's notes)
    # Injected faults (eval.faults_report) read by its guard: (record key, column) of each flag its guard
    # raises, totalled over the injected and the clean runs; and its paper's own figure the injected runs
    # are read beside, (figure, the paper's value)
    fault_flags: ClassVar[tuple[tuple[str, str], ...]] = ()
    fault_figure: ClassVar[tuple[str, str] | None] = None

    def configure(self, value: str, given: Mapping[str, str]) -> dict[str, Any]:
        """The options ``--protocol VALUE:KEY=...`` turns on (merged into ``cfg.options[self.name]``);
        a ConfigError names a bad key's value."""
        return {}

    def options(self, cfg: EvalConfig) -> Mapping[str, Any]:
        """Its options in this eval (empty: none of its switches was given)."""
        return cfg.options.get(self.name, {})

    def check(self, cfg: EvalConfig) -> None:
        """Raise a UserError before any run when its options cannot work in this eval."""

    def manifest(self, cfg: EvalConfig, previous: Mapping[str, Any]) -> dict[str, Any]:
        """What it records in the directory's manifest (``previous``: the manifest before this session)."""
        return {}

    def merged(self, manifests: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Its manifest entries for shards merged into one directory (``eval.merge``)."""
        return {}

    async def stored(self, pass_: StoredPass) -> None:
        """With ``--report-only``: its work over the runs a directory already holds (an audit, say)."""

    def advise(self, cfg: EvalConfig) -> list[str]:
        """Notes for the user before the runs (a protocol run outside its paper's conditions, say)."""
        return []

    def judges(self, cfg: EvalConfig) -> bool:
        """Whether its judging pass asks the judge anything in this eval."""
        return False

    def added_settings(self, cfg: EvalConfig, log: Callable[[str], None]) -> list[Preset]:
        """Settings its runs need beside the eval's (each logged with its reason)."""
        return []

    def variants(self, problems: list[Problem], cfg: EvalConfig) -> list[Problem]:
        """Variants of the problems it adds to the eval (each a Problem with its ``variant`` name)."""
        return []

    async def written_variants(self, problems: list[Problem], pass_: VariantPass) -> list[Problem]:
        """Variants a model writes before the runs (its left-out ones in ``pass_.left_out``)."""
        return []

    def skips(self, problem: Problem, setting: Preset) -> bool:
        """Whether a run of ``problem`` (one of its variants) under ``setting`` would say nothing."""
        return False

    def sections(self, data: DatasetData) -> dict[str, Any]:
        return {}

    def tables(self, summary: dict[str, Any], dataset: str) -> list[Table]:
        return []

    def notes(self, summary: dict[str, Any], dataset: str) -> list[str]:
        return []

    def plots(self, summary: dict[str, Any], dataset: str, directory: Path, plt: Any) -> list[Path]:
        return []

    def files(self, summary: dict[str, Any]) -> dict[str, str]:
        """Extra report files by name (written with the CSV form)."""
        return {}

    async def judge(self, pass_: JudgePass) -> None:
        return None

    def read_faults(self, runs: InjectedRuns) -> dict[str, Any] | None:
        """Its guard's reading of one setting's injected runs: the entry under its name in that setting
        and fault's row of the injected-faults section (None: nothing to read)."""
        return None

    def fault_tables(self, rows: Sequence[FaultRow], dataset: str) -> list[Table]:
        """Its tables over the injected-faults section (each row holds its entry, if any, under its name)."""
        return []

    def fault_figure_rows(self, row: FaultRow) -> list[list[str]]:
        """Its rows of the table that reads the injected runs beside the papers' figures:
        [figure, "setting fault", value]."""
        return []

    def fault_panel(self, rows: Sequence[FaultRow]) -> Callable[[Any], None] | None:
        """A panel of its own beside the injected-faults plot: draws on a matplotlib axis (None: none)."""
        return None


def installed() -> list[EvalProtocol]:
    """Every registered protocol, in report order."""
    return list(_load(tuple(plugins.names(GROUP))))


@functools.lru_cache(maxsize=8)
def _load(names: tuple[str, ...]) -> tuple[EvalProtocol, ...]:
    found = [plugins.load(GROUP, n, "protocol")() for n in names]
    return tuple(sorted(found, key=lambda p: (p.order, p.name)))


def settings_of(value: str) -> tuple[str, ...]:
    """The settings ``--protocol VALUE`` adds; a clear error naming every installed value otherwise."""
    return chosen([value]).settings


@dataclass(frozen=True)
class Chosen:
    """What the ``--protocol`` values of an eval ask for."""

    values: tuple[str, ...]  # the values' names, as the manifest records them
    settings: tuple[str, ...]  # the settings they add (``-c`` texts), in order, once each
    options: dict[str, dict[str, Any]]  # a protocol's name -> the options its switches turned on


def chosen(texts: list[str] | tuple[str, ...]) -> Chosen:
    """Read ``--protocol VALUE[:KEY=VALUE,...]`` texts (one grammar with ``-c``'s): a value adds its
    protocol's settings or turns one of its switches on; a clear error names every installed value
    or, for a bad key, the keys its switch takes."""
    by_value: dict[str, EvalProtocol] = {v: p for p in installed() for v in (*p.settings, *p.switches)}
    values: list[str] = []
    settings: list[str] = []
    options: dict[str, dict[str, Any]] = {}
    for text in texts:
        value, _, rest = text.strip().partition(":")
        protocol = by_value.get(value)
        if protocol is None:
            raise ConfigError(
                f"unknown protocol {value!r}",
                fix=f"use one of {', '.join(sorted(by_value)) or 'none installed'} (`tuiagent protocols` lists them)",
            )
        given = _pairs(text, rest)
        if value in protocol.settings:
            if given:
                raise ConfigError(f"--protocol {value} takes no keys (given: {', '.join(given)})")
            settings += [t for t in protocol.settings[value] if t not in settings]
        else:
            unknown = set(given) - set(protocol.switches[value].keys)
            if unknown:
                keys = ", ".join(protocol.switches[value].keys) or "none"
                raise ConfigError(
                    f"--protocol {value} has no key {', '.join(sorted(unknown))}", fix=f"its keys: {keys}"
                )
            options.setdefault(protocol.name, {}).update(protocol.configure(value, given))
        values += [value] if value not in values else []
    return Chosen(tuple(values), tuple(settings), options)


def _pairs(text: str, rest: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in filter(None, (i.strip() for i in rest.split(","))):
        key, eq, val = item.partition("=")
        if not eq or not key.strip() or not val.strip():
            raise ConfigError(f"--protocol {text!r}: {item!r} is not KEY=VALUE")
        pairs[key.strip()] = val.strip()
    return pairs


def ran_protocols(manifest: Mapping[str, Any]) -> list[str]:
    """The ``--protocol`` values an eval directory's manifest records (a single ``protocol`` in
    directories written before an eval took several)."""
    if manifest.get("protocols"):
        return list(manifest["protocols"])
    return [manifest["protocol"]] if manifest.get("protocol") else []


def picked(given: Mapping[str, str], key: str, offered: Iterable[str], default: Iterable[str], what: str) -> list[str]:
    """The values of ``key`` (several joined by ``+``: a comma separates keys), or ``default`` when it is
    not given; a ConfigError names each one that is not ``offered`` (``what``: "cue", say)."""
    offered = list(offered)
    values = [v.strip() for v in given[key].split("+") if v.strip()] if key in given else list(default)
    unknown = [v for v in values if v not in offered]
    if unknown or not values:
        raise ConfigError(f"unknown {what} {', '.join(unknown) or '(none)'}", fix=f"use {', '.join(offered)}")
    return values
