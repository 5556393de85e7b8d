"""The cue probe's report ("Spurious Tool Use", arXiv 2609.16268): ΔTool Y-N over all items, and on
the items where the tool is not needed, as Definition 1 counts it.

ΔTool Y-N [paper, section 2] = the tool-selection rate with the cue (Y) minus without it (N), the
rate being the share of runs with an executed call. Definition 1 asks for it where the tool T_s "does
not contribute to task performance": the items where it is not needed. Which items those are is ours
(the paper's are a whole task type, math questions for a search tool):

- ``no_tool``: the items the no-tool (CoT) setting solves on the question as written;
- ``judge``: the items on which the judge (``--judge``) calls none of the setting's executed calls
  necessary, with and without the cues (items with an unparseable or unjudged call are left out and
  counted; items without any call are in). This set depends on what the runs did.

Beside each figure, Definition 1's utility condition, P(R=1 | x_c, T_s) <= P(R=1 | x_c, T != T_s)
("using T_s provides no advantage over not using it") [paper, section 2]: among the tool setting's
cued runs, the accuracy of those that called the tool against that of those that did not (undecided
when either group is empty). Beside it [ours]: the tool setting's accuracy on all its cued runs and the
no-tool setting's on the same cued items, an intervention reading (the tool offered or not) that
stays readable when every run calls.

Each figure is given per cue, pooled over each family of cues that ran (``code`` and ``search``)
when both did, and over all cues. The tool here is a Python kernel, so the code-semantic cues are the
ones aligned with it and the search-semantic ones are cues not aligned with it, which is why the
families are pooled apart. That is not the paper's swapped-cue control (section 5.4, Tables 3 and
4), which moves cues between *training* tasks; here no model is trained, a cue only meets the
Python tool at inference [ours].
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from guards.necessity.cues import CODE_CUES, CUE_PREFIX, CUES, SEARCH_CUES, cue_variants
from guards.necessity.judging import call_verdicts, cue_probe_runs, necessity_items, needed
from tuiagent.eval.judging import judge_eval
from tuiagent.eval.protocols import DatasetData, EvalProtocol, JudgePass, Switch, Table, cell, picked
from tuiagent.eval.stats import rounded
from tuiagent.presets import resolve_settings

if TYPE_CHECKING:
    from tuiagent.eval.datasets import Problem
    from tuiagent.eval.harness import EvalConfig
    from tuiagent.presets import Preset

FIGURES = {
    "all": "all items",
    "no_tool": "tool not needed (Definition 1): items the no-tool run solves",
    "judge": "tool not needed (Definition 1): items the judge calls no call necessary in",
}

Item = tuple[str, int]  # problem id, seed


def _item(r: dict[str, Any]) -> Item:
    return r["problem_id"], r["seed"]


def _rate(rs: list[dict[str, Any]]) -> float | None:
    return sum((r.get("tcn") or 0) > 0 for r in rs) / len(rs) if rs else None


def _acc(rs: list[dict[str, Any]]) -> float | None:
    return sum(r.get("correct") is True for r in rs) / len(rs) if rs else None


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 4)


FAMILIES = {"code": CODE_CUES, "search": SEARCH_CUES}  # the paper's code- and search-semantic cues


def _pools(cues: list[str]) -> dict[str, list[str]]:
    """The cue variants each pooled row covers: each family that ran when both did, then all."""
    families = {
        f"all {name}": [c for c in cues if c[len(CUE_PREFIX) :] in members] for name, members in FAMILIES.items()
    }
    ran = {name: members for name, members in families.items() if members}
    return {**(ran if len(ran) > 1 else {}), "all": cues}


def _cue_figure(
    runs: dict[str, list[dict[str, Any]]], no_tool: dict[str, list[dict[str, Any]]], cues: list[str], items: set[Item]
) -> dict[str, Any]:
    """Y and N tool rates, ΔTool Y-N and the utility condition over the cue variants ``cues``, pooled."""
    y: list[dict[str, Any]] = []
    n: list[dict[str, Any]] = []
    free: list[dict[str, Any]] = []
    for cue in cues:
        cued = [r for r in runs.get(cue, []) if _item(r) in items]
        keys = {_item(r) for r in cued}
        y += cued
        n += [r for r in runs.get("", []) if _item(r) in keys]
        free += [r for r in no_tool.get(cue, []) if _item(r) in keys]
    ry, rn, acc_y, acc_free = _rate(y), _rate(n), _acc(y), _acc(free)
    called = [r for r in y if (r.get("tcn") or 0) > 0]
    acc_called, acc_uncalled = _acc(called), _acc([r for r in y if (r.get("tcn") or 0) == 0])
    return {
        "runs": len(y),
        "tool_rate_y": rounded(ry),
        "tool_rate_n": rounded(rn),
        "delta_tool_y_n": _diff(ry, rn),
        "accuracy_y_called": rounded(acc_called),
        "accuracy_y_no_call": rounded(acc_uncalled),
        "utility_holds": None if acc_called is None or acc_uncalled is None else acc_called <= acc_uncalled,
        "accuracy_y": rounded(acc_y),
        "accuracy_y_no_tool": rounded(acc_free),
        "accuracy_n": rounded(_acc(n)),
    }


def figure(
    runs: dict[str, list[dict[str, Any]]], no_tool: dict[str, list[dict[str, Any]]], cues: list[str], items: set[Item]
) -> dict[str, Any]:
    """Per cue, per family of cues (when both ran) and over all cues: Y and N tool rates, ΔTool Y-N,
    and the utility condition, on ``items``. ``runs`` / ``no_tool``: the tool / no-tool setting's runs
    by variant ("" for the question as written); a pooled N counts each cue's items once per cue."""
    out = {cue[len(CUE_PREFIX) :]: _cue_figure(runs, no_tool, [cue], items) for cue in cues}
    return out | {name: _cue_figure(runs, no_tool, members, items) for name, members in _pools(cues).items()}


def cue_section(
    records: list[dict[str, Any]],
    settings: list[str],
    modes: dict[str, str],
    verdicts: dict[str, list[Any]] | None = None,
) -> dict[str, Any] | None:
    """The probe per tool setting (one dataset's records); None without cued runs. ``modes``: each
    setting's mode ("tool" or "cot"); ``verdicts``: the judge's values per run key and call."""
    cues = sorted({r["variant"] for r in records if str(r.get("variant", "")).startswith(CUE_PREFIX)})
    if not cues:
        return None
    by_setting: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in records:
        by_setting.setdefault(r["setting"], {}).setdefault(r.get("variant") or "", []).append(r)
    free_name = next((s for s in settings if modes.get(s) == "cot" and s in by_setting), None)
    free = by_setting.get(free_name, {}) if free_name else {}
    solved = {_item(r) for r in free.get("", []) if r.get("correct") is True}
    out: dict[str, Any] = {}
    for s in settings:
        if modes.get(s, "tool") != "tool" or s not in by_setting:
            continue
        runs = by_setting[s]
        items = {_item(r) for rs in runs.values() for r in rs}
        section: dict[str, Any] = {
            "no_tool_setting": free_name,
            "items": {"all": len(items)},
            "figures": {"all": figure(runs, free, cues, items)},
        }
        if free_name:
            section["items"]["no_tool"] = len(items & solved)
            section["figures"]["no_tool"] = figure(runs, free, cues, items & solved)
        if verdicts is not None:
            said: dict[Item, list[bool | None]] = {}
            for rs in runs.values():
                for r in rs:
                    said.setdefault(_item(r), []).append(needed(verdicts.get(r["key"], [None])))
            not_needed = {i for i, v in said.items() if v and all(x is False for x in v)}
            section["items"]["judge"] = len(not_needed)
            section["items"]["judge_unsure"] = sum(None in v for v in said.values())
            called = {_item(r) for rs in runs.values() for r in rs if (r.get("tcn") or 0) > 0}
            # the items in with no call in any run: there ΔTool is 0 whatever the cue did elsewhere
            section["items"]["judge_without_calls"] = len(not_needed - called)
            section["figures"]["judge"] = figure(runs, free, cues, not_needed)
        out[s] = section
    return out


def _without_calls(items: dict[str, int], name: str) -> str:
    """The judge's set names how many of its items had no call at all (a judge that calls every call
    necessary leaves only those, where ΔTool Y-N is 0 by construction)."""
    return (
        f", {items['judge_without_calls']} without any call"
        if name == "judge" and "judge_without_calls" in items
        else ""
    )


def cue_table(cues: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """The probe as one table: a row per setting, figure and cue (values, not yet formatted)."""
    header = [
        "setting",
        "items",
        "cue",
        "tool rate Y",
        "tool rate N",
        "Δ Tool Y-N",
        "acc Y (called)",
        "acc Y (no call)",
        "utility holds",
        "acc Y (tool setting)",
        "acc Y (no-tool setting)",
        "acc N",
        "n",
    ]
    rows = []
    for s, section in cues.items():
        for name, fig in section["figures"].items():
            label = f"{FIGURES[name]} ({section['items'][name]}{_without_calls(section['items'], name)})"
            for cue, c in fig.items():
                rows.append(
                    [
                        s,
                        label,
                        cue,
                        c["tool_rate_y"],
                        c["tool_rate_n"],
                        c["delta_tool_y_n"],
                        c["accuracy_y_called"],
                        c["accuracy_y_no_call"],
                        c["utility_holds"],
                        c["accuracy_y"],
                        c["accuracy_y_no_tool"],
                        c["accuracy_n"],
                        c["runs"],
                    ]
                )
    return header, rows


class CueProbe(EvalProtocol):
    """The cue probe (``--protocol cues[:cue=...]``): its section, and with ``--judge`` the necessity of
    each executed call of the cued items."""

    name = "necessity"
    title = "Spurious tool use (arXiv 2609.16268): the cue probe's ΔTool Y-N and Definition 1's utility test"
    order = 20
    fault_flags = (("necessity_flags", "necessity flags"),)  # its flags on injected runs (eval --inject)
    judge_use = "each executed call's necessity on the cued items (--protocol cues)"
    same_in_shards = ("cues",)
    switches = {
        "cues": Switch(
            "run each problem again with each of the paper's code-semantic cues (cell, usr_bin, code) and report "
            "Delta Tool Y-N over all items and where the tool is not needed (Definition 1); adds the no-tool setting "
            "cot when none is given; with --judge, each executed call's necessity (Appendix A.3)",
            {"cue": f"these cues instead, joined by +: {', '.join(CUES)}"},
        )
    }

    def configure(self, value: str, given: Mapping[str, str]) -> dict[str, Any]:
        return {"cues": picked(given, "cue", CUES, CODE_CUES, "cue")}

    def cues(self, cfg: EvalConfig) -> list[str]:
        return list(self.options(cfg).get("cues", []))

    def manifest(self, cfg: EvalConfig, previous: Mapping[str, Any]) -> dict[str, Any]:
        return {"cues": self.cues(cfg)}

    def variants(self, problems: list[Problem], cfg: EvalConfig) -> list[Problem]:
        return cue_variants(problems, self.cues(cfg))

    def added_settings(self, cfg: EvalConfig, log: Callable[[str], None]) -> list[Preset]:
        """The no-tool condition when none is among the settings: Definition 1's items and its utility
        condition need one."""
        if not self.cues(cfg) or any(s.spec.mode == "cot" for s in cfg.settings):
            return []
        log("cue probe: adding the no-tool setting 'cot' (Definition 1's items and utility condition need it)")
        return resolve_settings(["cot"])

    def sections(self, data: DatasetData) -> dict[str, Any]:
        e = data.eval
        verdicts = call_verdicts(data.records, e.judgements, e.judge) if e.judgements is not None and e.judge else None
        return {"cues": cue_section(data.records, e.settings, dict(e.modes), verdicts)}

    def tables(self, summary: dict[str, Any], dataset: str) -> list[Table]:
        section = summary["datasets"][dataset].get("cues")
        if not section:
            return []
        header, rows = cue_table(section)
        return [
            (
                f"{dataset}: spurious-tool-use cue probe (tool rate = share of runs with a call; utility "
                "holds: acc Y (called) <= acc Y (no call), Definition 1; the tool and no-tool settings' "
                "accuracies on the cued items beside it [ours])",
                header,
                [
                    [
                        {True: "yes", False: "no"}[c] if isinstance(c, bool) else c if isinstance(c, str) else cell(c)
                        for c in row
                    ]
                    for row in rows
                ],
            )
        ]

    def judges(self, cfg: EvalConfig) -> bool:
        return bool(self.cues(cfg))

    async def judge(self, pass_: JudgePass) -> None:
        cfg = pass_.cfg
        if self.cues(cfg):
            tool = {s.name for s in cfg.settings if s.spec.mode == "tool"}
            items = necessity_items(cue_probe_runs(pass_.store.records.values(), tool))
            await judge_eval(
                cfg.judge or "", cfg.models_file, pass_.store.dir, items, pass_.log, "call(s)", models=pass_.models
            )
