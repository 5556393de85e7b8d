"""A guard and its eval protocol that live outside tuiagent/ and guards/ and are registered only
through the ``tuiagent.guards`` and ``tuiagent.protocols`` entry points of the dist-info beside them:
the proof that a paper is a plug-in (tests/plugins/test_probe_guard.py installs it). The guard flags
tool outputs longer than ``max_chars`` and describes itself like any shipped guard; the protocol
adds its settings to ``tuiagent eval`` and its table to the report, and its switch (``--protocol
probe-suffix:text=...``) asks every problem again with a sentence after it; its condition, a word of
the setting grammar, cuts tool outputs short (``tuiagent.conditions``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guards.base import GuardBase, setting
from tuiagent.eval.datasets import Problem, with_variant
from tuiagent.eval.protocols import DatasetData, EvalProtocol, Switch, Table, cell
from tuiagent.protocol import FLAG, PASS, Call, Display, Gauge, RunRecord, RunView, Span, Verdict, VerdictRecord

# A named run condition ("-c terse", a preset's condition = "terse"): tool outputs cut at 20 characters.
CONDITIONS = {"terse": {"output_chars": 20}}


@dataclass(frozen=True)
class ProbeSettings:
    max_chars: int = setting(40, "a tool output longer than this is flagged", check=lambda v: v > 0, allowed="> 0")


class ProbeGuard(GuardBase):
    """Probe: flags long tool outputs (a test plug-in)."""

    name = "probe"
    order = 60
    Settings = ProbeSettings
    main_settings = ("max_chars",)
    summary = (("probe_long", "probe long"),)

    def __init__(self, settings: ProbeSettings):
        self.settings = settings

    def on_tool_result(self, call: Call, view: RunView) -> Verdict:
        n, limit = len(call.output), self.settings.max_chars
        return Verdict(
            FLAG if n > limit else PASS,
            reason=f"output of {n} chars",
            data={"call": call.call, "chars": n, "max_chars": limit, "long": n > limit},
        )

    @classmethod
    def note(cls, v: VerdictRecord) -> str:
        return f"probe {v.data.get('chars')} chars"

    @classmethod
    def display(cls, v: VerdictRecord) -> Display:
        d = v.data
        ratio = min(d["chars"] / (2 * d["max_chars"]), 1.0)
        return Display(
            "code",
            call=d.get("call"),
            lines=(
                (
                    Span("PROBE ", "bold"),
                    Gauge(ratio, 0.5, above="warn", below="ok"),
                    Span(f" {d['chars']} chars", "bold"),
                    Span(" long" if d["long"] else " short", "warn" if d["long"] else "ok"),
                ),
            ),
        )

    @classmethod
    def run_budget(cls, settings: ProbeSettings) -> dict[str, float]:
        """What a plug-in needs, declared like PruneTIR does: a run of at least 6 tool calls."""
        return {"max_tool_calls": 6}

    @classmethod
    def metrics(cls, run: RunRecord) -> dict[str, Any]:
        return {"probe_long": sum(bool(v.data.get("long")) for v in run.of(cls.name))}


class ProbeProtocol(EvalProtocol):
    """The guard's eval protocol: ``--protocol probe-sweep`` runs no guard, the probe, and the probe
    at a tighter limit; the report gets a table of the runs each setting flagged."""

    name = "probe"
    title = "Probe (an example plug-in): runs with a long tool output, per setting"
    order = 90
    settings = {"probe-sweep": ("none", "probe", "probe:probe.max_chars=10")}
    switches = {"probe-suffix": Switch("ask every problem again with a sentence after it", {"text": "the sentence"})}

    def configure(self, value: str, given: Mapping[str, str]) -> dict[str, Any]:
        return {"suffix": given.get("text", "Check it with code.")}

    def variants(self, problems: list[Problem], cfg: Any) -> list[Problem]:
        suffix = self.options(cfg).get("suffix")
        return [with_variant(p, "probe:suffix", f"{p.question} {suffix}") for p in problems] if suffix else []

    def manifest(self, cfg: Any, previous: Mapping[str, Any]) -> dict[str, Any]:
        return {"probe_suffix": self.options(cfg).get("suffix")}

    def sections(self, data: DatasetData) -> dict[str, Any]:
        rows = {}
        for name, runs in data.clean.items():
            if "probe" in data.eval.guards.get(name, []):
                rows[name] = {"runs": len(runs), "flagged": sum(r.get("probe_long", 0) > 0 for r in runs)}
        return {"probe": rows or None}

    def tables(self, summary: dict[str, Any], dataset: str) -> list[Table]:
        rows = summary["datasets"][dataset].get("probe")
        if not rows:
            return []
        return [
            (
                f"{dataset}: probe, runs with a flagged tool output",
                ["setting", "runs", "flagged", "share"],
                [[s, str(r["runs"]), str(r["flagged"]), cell(r["flagged"] / r["runs"])] for s, r in rows.items()],
            )
        ]
