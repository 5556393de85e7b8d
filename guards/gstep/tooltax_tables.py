"""The tool-use-tax section of the eval report in the paper's layout (arXiv 2605.00136: Tables 2-7, their
names: Δsty, Δfrc, Δcmp, Gen., Proto., Ovlp., Cls.), in percent, with 95% intervals, and the paper's own
figure beside ours where its text gives one, with the model it is for (all on GSM8K-Sem-Distractor)."""

from __future__ import annotations

from typing import Any

from guards.gstep.conditions import LABELS as CONDITION_LABELS
from guards.gstep.tooltax import PAPER_GSM8K, TAXONOMY

Table = tuple[str, list[str], list[list[str]]]
SOURCES = (("genuine", "Gen."), ("sty", "Δsty−"), ("frc", "Δfrc−"), ("cmp", "Δcmp−"))
DELTAS = (
    ("gap", "Gap = Full − CoT"),
    ("sty", "Δsty = FCStyle − CoT"),
    ("frc", "Δfrc = NoopTool − FCStyle"),
    ("cmp", "Δcmp = Full − NoopTool"),
    ("oracle", "Δoracle = OracleCalc − Full"),
    ("context", "Δcontext = OracleEvid − Full"),
    ("turns", "Full − Max1Turn (ours)"),
)


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def with_ci(value: float | None, ci: list[float | None] | None) -> str:
    if value is None:
        return "–"
    if not ci or None in ci:
        return pct(value)
    return f"{pct(value)} [{pct(ci[0])}, {pct(ci[1])}]"


def paper(key: str) -> str:
    """The paper's figures for ``key``, model by model."""
    figures = PAPER_GSM8K.get(key, {})
    return "; ".join(f"{m} {v:.2f}" for m, v in figures.items()) or "–"


# What the report says of the tool the tool-use-tax conditions offered (RunSettings.tool).
TOOL_WORDS = {
    "calculator": "a calculator, one arithmetic expression a call (the paper's GSM8K agent, section 3.1)",
    "python": "Python in a Jupyter kernel [ours: the paper's GSM8K agent has a calculator, section 3.1; "
    "protocol tooltax-calculator]",
    "mixed": "not the same in every condition (compare conditions of one tool only)",
}


def scope_title(t: dict[str, Any]) -> str:
    if t["scope"] == "distractors":
        return "on the semantic-distractor variants (pooled over types, and per type)"
    return "on the questions as written (no distractor variant: no --protocol distractors, or every one left out)"


def tooltax_tables(t: dict[str, Any], dataset: str, validity: dict[str, Any] | None = None) -> list[Table]:
    """(title, header, rows) of every table of the section."""
    scopes = list(t["scopes"])
    where = scope_title(t)
    tables: list[Table] = []
    f1s = t["scopes"][scopes[0]].get("evidence_f1", {})
    header = ["condition", "setting", *scopes, f"Evid-F1 ({scopes[0]})", "paper (GSM8K)"]
    rows = []
    for c, label in CONDITION_LABELS.items():
        setting = t["settings"].get(label)
        cells = []
        for s in scopes:
            a = t["scopes"][s]["accuracy"].get(label)
            cells.append(f"{with_ci(a['accuracy'], a['ci'])} (n={a['units']})" if a else "–")
        f1 = (f1s.get(label) or {}).get("mean")
        rows.append([label, setting or "not run", *cells, "–" if f1 is None else f"{f1:.2f}", paper(f"acc_{c}")])
    tables.append(
        (
            f"{dataset}: Table 2 layout: accuracy (%) of the seven conditions {where}; 95% bootstrap CI "
            "over problems; Evidence-F1 over the question's quantities, mean over runs; the tool: "
            + TOOL_WORDS[t.get("tool", "python")],
            header,
            rows,
        )
    )

    rows = []
    for s in scopes:
        d = t["scopes"][s]["deltas"]
        rows.append([s, *(_delta(d.get(key)) for key, _ in DELTAS), largest_cost(d)])
    for model in PAPER_GSM8K["gap"]:
        rows.append(
            [
                f"paper: {model}",
                *(_paper_delta("gap" if key == "gap" else f"delta_{key}", model) for key, _ in DELTAS),
                "",
            ]
        )
    tables.append(
        (
            f"{dataset}: Table 3 layout: Δ decomposition of the CoT-to-Tool gap (pp) {where}; paired "
            "bootstrap 95% CI; Δsty, Δfrc, Δcmp on the problems all four chain conditions have (they sum "
            "to the Gap there); the largest cost is the most negative of the three (the paper's bold)",
            ["scope", *(name for _, name in DELTAS), "largest cost"],
            rows,
        )
    )

    rows = []
    for s in scopes:
        a = t["scopes"][s]["attribution"]
        if a:
            rows.append(
                [
                    s,
                    str(a["n_w"]),
                    *(with_ci(a[k]["share"], a[k]["ci"]) for k, _ in SOURCES),
                    with_ci(a["proto"]["share"], a["proto"]["ci"]),
                ]
            )
    for model in PAPER_GSM8K["proto"]:
        rows.append(
            [f"paper: {model}", "", *(_paper_share(k, model) for k, _ in SOURCES), _paper_share("proto", model)]
        )
    if rows:
        tables.append(
            (
                f"{dataset}: Table 4 layout: sample-level Δ attribution (% of the N_w wrong Agent-Full runs) "
                f"{where}; Proto. = Δsty− + Δfrc− + Δcmp−; Wilson 95% CI",
                ["scope", "N_w", *(h for _, h in SOURCES), "Proto."],
                rows,
            )
        )

    main = t["scopes"][scopes[0]]
    if main.get("crosstab"):
        rows = [
            [f"{k} ({TAXONOMY[k]})", str(v["n"]), *(pct(v[c]["share"]) for c, _ in SOURCES)]
            for k, v in main["crosstab"].items()
        ]
        tables.append(
            (
                f"{dataset}: Table 5 layout: A–F × Δ cross-tabulation of the wrong Agent-Full runs (row %), "
                f"{scopes[0]}; each run under its dominant symptom (E, B, D, C, A, F in that order)",
                ["type", "n", *(h for _, h in SOURCES)],
                rows,
            )
        )
    if main.get("taxonomy"):
        rows = []
        for label, tx in main["taxonomy"].items():
            rows.append(
                [
                    label,
                    str(tx["failed"]),
                    *(f"{pct(tx['dominant'][k]['share'])} ({pct(tx['any'][k]['share'])})" for k in TAXONOMY),
                    "–" if tx["evidence_f1"] is None else f"{tx['evidence_f1']:.2f}",
                ]
            )
        tables.append(
            (
                f"{dataset}: A–F failure taxonomy of each tool condition's failed runs, {scopes[0]}: % dominant "
                "(% showing it at all); B, D, E read off the trajectory, C = Evidence-F1 < 0.5, A = fewer "
                "computations than the gold steps (GSM8K's annotations, else the judge's count), F by "
                "elimination",
                ["condition", "failed", *(f"{k} {TAXONOMY[k]}" for k in TAXONOMY), "mean Evid-F1"],
                rows,
            )
        )
        plans = (main["taxonomy"].get(CONDITION_LABELS["full"]) or {}).get("f_plans")
        if plans and sum(plans.values()) > plans["not_judged"]:
            tables.append(
                (
                    f"{dataset}: the judge on the Type F (planning mismatch) Agent-Full runs: a coherent but "
                    "wrong plan?",
                    ["yes", "no", "unparseable", "not judged"],
                    [[str(plans[k]) for k in ("coherent_wrong", "not", "unparseable", "not_judged")]],
                )
            )

    rows = []
    for s in scopes:
        o = t["scopes"][s]["overlap"]
        if o:
            rows.append([s, str(o["of"]), str(o["count"]), with_ci(o["share"], o["ci"])])
    rows += [[f"paper: {m}", "", "", f"{v:.1f}"] for m, v in PAPER_GSM8K["overlap"].items()]
    tables.append(
        (
            f"{dataset}: Table 6 layout: capability overlap {where}: TB = tool-benefited runs (Agent-Full "
            "right, Agent-NoopTool wrong), CoT = those NoTool-CoT also solves; Wilson 95% CI",
            ["scope", "TB", "CoT", "Ovlp. (%)"],
            rows,
        )
    )

    rows = []
    for s in scopes:
        for name, g in t["scopes"][s]["gstep"].items():
            d = g["delta_vs_full"] or {}
            rows.append(
                [
                    s,
                    f"{name} (gate off in every run)" if g.get("gate_off") else name,
                    pct(g["full"]),
                    pct(g["cot"]),
                    "–" if g["full"] is None else pct(g["full"] - g["cot"]),
                    pct(g["accuracy"]),
                    with_ci(d.get("value"), d.get("ci")),
                    with_ci(g["cls"], g["cls_ci"]),
                ]
            )
    if rows:
        for s in scopes:
            if len(t["scopes"][s]["gstep"]) > 1 and t["scopes"][s]["best_cls"] is not None:
                rows.append([s, "the better (the paper's Cls.)", "", "", "", "", "", pct(t["scopes"][s]["best_cls"])])
        rows.append(
            ["paper: Qwen3-4B", "Gate / +CRITIC", "50.64", "82.64", "-32.00", "69.12 / 74.88", "+24.24", "75.75"]
        )
        rows.append(["paper: Qwen3-32B", "better of the two", "", "", "", "", "", "23.21"])
        tables.append(
            (
                f"{dataset}: Table 7 layout: G-STEP gap closure {where}: Gap = Full − CoT, Cls. = (Acc − Full) "
                "/ (CoT − Full), bootstrap 95% CI; '–' where CoT does not beat Full (no gap to close)",
                ["scope", "setting", "Full", "CoT", "Gap", "Acc", "Δ vs Full", "Cls. (%)"],
                rows,
            )
        )
    if validity is not None:
        tables.append((f"{dataset}: distractor validity", ["check", "result"], validity_rows(validity)))
    if t["missing"]:
        tables.append(
            (
                f"{dataset}: conditions not run (the quantities that need them are '–')",
                ["condition"],
                [[m] for m in t["missing"]],
            )
        )
    return tables


def validity_rows(v: dict[str, Any]) -> list[list[str]]:
    rows = [
        ["every number and sentence of the question kept", "checked (variants that lost one are left out)"],
        ["asks no question, states no value of the solution", "checked (the gold answer, GSM8K's step results)"],
    ]
    if v.get("judge"):
        rows.append(
            [
                "answer unchanged (judge)",
                f"{v['judge']}: {v['judged']} judged, {v['changed']} change it (left "
                f"out), {v['unparseable']} unparseable (kept)"
                + (
                    f"; the mean probability of its replies is {v['reply_p']:.2f} (0.50: a coin flip)"
                    if v.get("reply_p") is not None
                    else ""
                ),
            ]
        )
    else:
        rows.append(["answer unchanged (judge)", "not checked: pass --judge MODEL"])
    return rows


def _delta(d: dict[str, Any] | None) -> str:
    if not d or d["value"] is None:
        return "–"
    return f"{with_ci(d['value'], d['ci'])} (n={d['units']})"


def largest_cost(deltas: dict[str, Any]) -> str:
    """The most negative of Δsty, Δfrc, Δcmp ("–" when none is negative or they are missing)."""
    values = {
        name.split(" ")[0]: deltas[key]["value"]
        for key, name in DELTAS[1:4]
        if deltas.get(key) and deltas[key]["value"] is not None
    }
    worst = min(values, key=lambda k: values[k], default=None)
    return worst if worst is not None and values[worst] < 0 else "–"


def _paper_delta(key: str, model: str) -> str:
    value = PAPER_GSM8K.get(key, {}).get(model)
    return "–" if value is None else f"{value:+.2f}"


def _paper_share(key: str, model: str) -> str:
    value = PAPER_GSM8K.get(key, {}).get(model)
    return "–" if value is None else f"{value:.1f}"
