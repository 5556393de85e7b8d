"""The tool-use tax (arXiv 2605.00136) as an eval protocol: its seven conditions (``--protocol
tooltax``, or ``tooltax-calculator`` with the paper's GSM8K tool), its decomposition and A-F taxonomy
(``guards.gstep.tooltax``, in the paper's layout by ``guards.gstep.tooltax_tables``), accuracy on the semantic
distractor variants beside the clean questions, and the judge's A-F pass."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from guards.gstep.distractors import DISTRACTOR_PREFIX, DISTRACTORS, check_answers_unchanged, distractor_variants
from guards.gstep.tooltax import (
    CHAIN,
    NOT_JUDGED,
    TOOL_CONDITIONS,
    Judged,
    condition_settings,
    gold_steps,
    load_pieces,
    plan_inputs,
    reported,
    run_symptoms,
    scopes,
    tooltax,
)
from guards.gstep.tooltax_tables import tooltax_tables
from tuiagent.core.judge import Judge
from tuiagent.core.judge_prompts import prompt
from tuiagent.core.judge_store import JudgementStore
from tuiagent.eval.judging import judged, with_judge
from tuiagent.eval.protocols import (
    DatasetData,
    EvalProtocol,
    JudgePass,
    Record,
    Switch,
    Table,
    VariantPass,
    cell,
    picked,
)
from tuiagent.eval.stats import right, rounded

if TYPE_CHECKING:
    from tuiagent.eval.datasets import Problem
    from tuiagent.eval.harness import EvalConfig

CONDITIONS = ("full", "cot", "fcstyle", "noop", "oracle", "evidence", "max1")
# [paper] the same with the GSM8K agent's tool, a calculator (section 3.1; kernels/calculator.py):
# every condition with the tool prompt offers it (NoTool-CoT has no tool prompt)
CALCULATOR = tuple(c if c == "cot" else f"{c}:tool=calculator" for c in CONDITIONS)


def _accuracy(records: list[Record]) -> float | None:
    return sum(map(right, records)) / len(records) if records else None


def distractor_section(records: list[Record], settings: list[str]) -> dict[str, Any] | None:
    """Per setting, the accuracy on each distractor type beside the clean accuracy on the same problems."""
    variants = sorted({r["variant"] for r in records if str(r.get("variant", "")).startswith(DISTRACTOR_PREFIX)})
    if not variants:
        return None
    out: dict[str, Any] = {}
    for s in settings:
        rs = [r for r in records if r["setting"] == s]
        with_variant = {r["problem_id"] for r in rs if r.get("variant") in variants}
        clean = [r for r in rs if not r.get("variant") and r["problem_id"] in with_variant]
        row: dict[str, Any] = {"clean": {"runs": len(clean), "accuracy": rounded(_accuracy(clean))}}
        for v in variants:
            vr = [r for r in rs if r.get("variant") == v]
            ids = {r["problem_id"] for r in vr}
            a, b = _accuracy(vr), _accuracy([r for r in clean if r["problem_id"] in ids])
            row[v[len(DISTRACTOR_PREFIX) :]] = {
                "runs": len(vr),
                "accuracy": rounded(a),
                "delta_vs_clean": None if a is None or b is None else rounded(a - b),
            }
        out[s] = row
    return out


def distractor_table(section: dict[str, Any], dataset: str) -> Table:
    kinds = sorted({k for row in section.values() for k in row if k != "clean"})
    return (
        f"{dataset}: semantic distractors (accuracy; Δ vs clean on the same problems)",
        ["setting", "clean", *kinds],
        [
            [
                s,
                cell(row["clean"]["accuracy"]),
                *(f"{cell(row[k]['accuracy'])} ({cell(row[k]['delta_vs_clean'])})" if k in row else "–" for k in kinds),
            ]
            for s, row in section.items()
        ],
    )


def setting_tools(specs: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Each setting's ``tool`` run key, as its manifest entry records it (absent: "python")."""
    return {name: str((spec.get("run") or {}).get("tool", "python")) for name, spec in specs.items()}


GOLD_STEPS = prompt("gold_steps")
PLAN_MISMATCH = prompt("plan_mismatch")


def taxonomy_judged(store: JudgementStore, judge: str) -> Judged:
    """The judge's cached answers for the A-F taxonomy (guards.gstep.tooltax), looked up by their inputs."""
    return Judged(
        steps=lambda reference: judged(store, judge, GOLD_STEPS, {"reference": reference}),
        plan=lambda inputs: judged(store, judge, PLAN_MISMATCH, inputs),
    )


async def judge_taxonomy(
    judge: Judge,
    records: list[dict[str, Any]],
    names: list[str],
    conditions: dict[str, str | None],
    log: Callable[[str], None],
) -> int:
    """With the whole degradation chain among the settings (``--protocol tooltax``), the taxonomy's
    judged parts, per dataset on the tool-use-tax section's main scope (the pooled
    distractor variants, or the clean questions): the gold steps of each failed tool run's reference
    that has no GSM8K annotations, then the plan of each wrong Agent-Full run that is Type F by
    elimination. How many questions were asked (not cached)."""
    which = condition_settings(names, conditions)
    if not all(c in which for c in CHAIN) or judge.store is None:  # only an eval of the whole chain
        return 0
    tool = {which[c] for c in TOOL_CONDITIONS if c in which}
    before = judge.cost.calls
    for dataset in sorted({r["dataset"] for r in records}):
        mine = [r for r in records if r["dataset"] == dataset]
        keep = next(iter(scopes(mine)[1].values()))
        failed = [r for r in mine if keep(r) and r["setting"] in tool and r.get("correct") is not True]
        for reference in sorted({str(r.get("reference") or "") for r in failed}):
            if reference.strip() and gold_steps(reference) is None:
                await judge.single(GOLD_STEPS, reference=reference)
        judged = taxonomy_judged(judge.store, judge.name)
        for r in failed:
            pieces = load_pieces(r) if r["setting"] == which["full"] else None
            if pieces is None:
                continue
            s = run_symptoms(r, pieces, judged)
            if s["dominant"] == "F":
                await judge.single(PLAN_MISMATCH, **plan_inputs(r, pieces))
    asked = judge.cost.calls - before
    if asked:
        log(f"judge {judge.model_id}: {asked} question(s) for the A-F taxonomy")
    return asked


def merged_validity(tallies: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The shards' answer-unchanged tallies of their distractor variants, summed (check_answers_unchanged)."""
    present = [t for t in tallies if t]
    if not present:
        return None
    return {
        "judge": present[0].get("judge"),
        **{k: sum(int(t.get(k) or 0) for t in present) for k in ("judged", "changed", "unparseable")},
    }


class ToolUseTax(EvalProtocol):
    name = "tooltax"
    title = "The tool-use tax (arXiv 2605.00136): seven conditions, the Δ chain, A-F taxonomy, distractors"
    order = 10
    settings = {"tooltax": CONDITIONS, "tooltax-calculator": CALCULATOR}
    fault_flags = (("gate_continues", "G-STEP continues"),)  # the gate's answer on injected runs (eval --inject)
    switches = {
        "distractors": Switch(
            "also run model-written variants of each problem, one semantic distractor each (section 2.1: thematic, "
            "paraphrase, parallel, hedged), cached in the user cache dir; with --judge, a variant the judge says "
            "changes the answer is left out",
            {
                "types": f"only these types, joined by +: {', '.join(DISTRACTORS)}",
                "model": "the models.toml model that writes them (default: the model under test)",
            },
        )
    }
    same_in_shards = ("distractors", "distractor_model")
    judge_use = (
        "whether each distractor variant keeps its answer (--protocol distractors), and the A-F taxonomy's "
        "judged parts (the whole chain of conditions, e.g. --protocol tooltax)"
    )

    def configure(self, value: str, given: Mapping[str, str]) -> dict[str, Any]:
        types = picked(given, "types", DISTRACTORS, DISTRACTORS, "distractor type")
        return {"types": types, "model": given.get("model")}

    def types(self, cfg: EvalConfig) -> list[str]:
        return list(self.options(cfg).get("types", []))

    def merged(self, manifests: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return {"distractor_validity": merged_validity([m.get("distractor_validity") for m in manifests])}

    def check(self, cfg: EvalConfig) -> None:
        """A writer that is not a models.toml model is said before any run."""
        model = self.options(cfg).get("model")
        if model:
            from tuiagent.config import load_models

            load_models(cfg.models_file).get(model)

    def manifest(self, cfg: EvalConfig, previous: Mapping[str, Any]) -> dict[str, Any]:
        return {"distractors": self.types(cfg)}

    async def written_variants(self, problems: list[Problem], pass_: VariantPass) -> list[Problem]:
        """The distractor variants the text checks and, with ``--judge``, the judge keep."""
        cfg = pass_.cfg
        if not self.types(cfg):
            return []
        factory, close, model_id = pass_.backend(self.options(cfg).get("model"))
        made, invalid = await distractor_variants(
            problems,
            self.types(cfg),
            model_id=model_id,
            backend_factory=factory,
            close_backend=close,
            on_progress=pass_.on_progress,
            log=pass_.log,
        )
        if invalid:
            pass_.log(
                f"{len(invalid)} distractor variant(s) failed the text checks (a number or sentence of the question "
                "lost, a question asked, a value of the solution stated) and are left out (listed in the report)"
            )
        validity: dict[str, Any] = {"judge": None, "judged": 0, "changed": 0, "unparseable": 0}
        if cfg.judge:
            made, changed, validity = await with_judge(
                cfg.judge,
                cfg.models_file,
                cfg.out,
                lambda judge: check_answers_unchanged(judge, made, pass_.log),
                concurrency=cfg.concurrency,
            )
            invalid += changed
        pass_.left_out.extend(invalid)
        pass_.notes.update({"distractor_model": model_id, "distractor_validity": validity})
        return made

    def advise(self, cfg: EvalConfig) -> list[str]:
        if self.types(cfg) or not self._whole_chain(cfg):
            return []
        return [
            "the tool-use tax is defined on semantic-distractor variants; without --protocol distractors its "
            "section is computed on the questions as written (and says so)"
        ]

    def judges(self, cfg: EvalConfig) -> bool:
        return self._whole_chain(cfg) or bool(self.types(cfg))

    @staticmethod
    def _whole_chain(cfg: EvalConfig) -> bool:
        return set(CHAIN) <= {s.spec.condition for s in cfg.settings}

    def sections(self, data: DatasetData) -> dict[str, Any]:
        e = data.eval
        conditions, guards = dict(e.conditions), {k: list(v) for k, v in e.guards.items()}
        judged = taxonomy_judged(e.judgements, e.judge) if e.judgements is not None and e.judge else NOT_JUDGED
        return {
            "tooltax": (
                tooltax(data.records, e.settings, conditions, guards, judged=judged, tools=setting_tools(dict(e.specs)))
                if reported(data.records, e.settings, conditions, guards)
                else None
            ),
            "distractors": distractor_section(data.records, e.settings),
            "distractor_validity": e.manifest.get("distractor_validity"),
        }

    def tables(self, summary: dict[str, Any], dataset: str) -> list[Table]:
        d = summary["datasets"][dataset]
        out: list[Table] = []
        if d.get("tooltax"):
            out += tooltax_tables(d["tooltax"], dataset, d.get("distractor_validity") if d["distractors"] else None)
        if d.get("distractors"):
            out.append(distractor_table(d["distractors"], dataset))
        return out

    async def judge(self, pass_: JudgePass) -> None:
        cfg, store = pass_.cfg, pass_.store
        settings = [s.name for s in cfg.settings]
        conditions = {s.name: s.spec.condition for s in cfg.settings}
        await with_judge(
            cfg.judge or "",
            cfg.models_file,
            store.dir,
            lambda j: judge_taxonomy(j, list(store.records.values()), settings, conditions, pass_.log),
            models=pass_.models,
        )
