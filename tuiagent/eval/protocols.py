"""A paper's evaluation protocol as a plug-in: what ``--protocol`` adds to an eval, what its judge
does after the runs, and what the report shows of it.

Protocols register under the ``tuiagent.protocols`` entry point (the shipped ones in pyproject.toml,
a plug-in's in its own dist-info); the harness, the report and the CLI know them only through
:func:`installed`. A protocol class sets ``name``, ``title`` and ``order`` (where its tables stand in
the report) and overrides what it has:

- ``settings``: the ``--protocol`` values it answers to, each with the settings it adds (``-c`` texts),
  or ``switches``: the eval options that make its runs;
- ``sections(data)``: its part of a dataset's summary, by key (``None`` where it has nothing to say);
- ``tables``, ``notes``, ``plots``, ``files``: its forms, read back from the summary;
- ``judge(pass_)``: its judging pass after the runs (with ``--judge``), cached in judgements.jsonl;
  ``judges(cfg)`` says whether it asks anything, ``advise(cfg)`` gives notes before the runs;
- ``variants``, ``added_settings`` and ``skips``: the problems' variants it adds (cued questions,
  injected faults), the settings its runs need, and the runs that would say nothing.

CONTRIBUTING.md walks through writing one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
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
    audit_judge: str | None = None  # the judge of ATTC's audits (--attc-audit)
    protocols: frozenset[str] = frozenset()  # the --protocol values the eval ran with


@dataclass(frozen=True)
class DatasetData:
    """One dataset of an eval: its records (variants included) and its clean runs per setting."""

    name: str
    eval: EvalData
    records: list[Record]
    clean: dict[str, list[Record]]
    row: Callable[[list[Record], list[Record] | None], dict[str, Any]]  # the report's per-setting row


@dataclass
class JudgePass:
    """What a protocol's judging pass after the runs may use."""

    cfg: EvalConfig
    store: ResultStore
    described: dict[str, dict[str, Any]]  # every setting the directory reports, earlier sessions' too
    protocols: frozenset[str]
    models: JudgeModels
    log: Callable[[str], None]


class EvalProtocol:
    """The base of every protocol: each hook does nothing until a protocol overrides it."""

    name: ClassVar[str]
    title: ClassVar[str]  # one line: the paper and what its protocol measures
    order: ClassVar[int] = 100
    settings: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    switches: ClassVar[str] = ""  # the eval options that produce its runs, where no --protocol value does
    judge_use: ClassVar[str] = ""  # what its judging pass asks, and with which options (for the eval's notes)

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


def installed() -> list[EvalProtocol]:
    """Every registered protocol, in report order."""
    return list(_load(tuple(plugins.names(GROUP))))


@functools.lru_cache(maxsize=8)
def _load(names: tuple[str, ...]) -> tuple[EvalProtocol, ...]:
    found = [plugins.load(GROUP, n, "protocol")() for n in names]
    return tuple(sorted(found, key=lambda p: (p.order, p.name)))


def settings_of(value: str) -> tuple[str, ...]:
    """The settings ``--protocol VALUE`` adds; a clear error naming every installed value otherwise."""
    offered = {v: texts for p in installed() for v, texts in p.settings.items()}
    if value not in offered:
        raise ConfigError(
            f"unknown protocol {value!r}",
            fix=f"use one of {', '.join(sorted(offered)) or 'none installed'} (`tuiagent protocols` lists them)",
        )
    return offered[value]
