"""`tuiagent eval --protocol tooltax --protocol distractors` end to end on the real SmolLM2-135M, with a scripted
judge: SmolLM2 writes the hedged variant's added text (inserted into the question; left out when it
asks a question, else judged), the parallel-entity variant is a hand-written one already in the cache (so the section is
on distractors whatever SmolLM2 writes), and the seven conditions run in real kernels."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from guards.gstep.distractors import cache_file
from tests.backends.conftest import smollm2_path  # noqa: F401 - a fixture
from tests.eval.helpers import models_file

pytestmark = pytest.mark.slow

QUESTION = {
    "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in "
    "May. How many clips did Natalia sell altogether in April and May?",
    "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
    "altogether in April and May.\n#### 72",
}


def test_the_protocol_with_distractors_on_smollm2(tmp_path: Path, smollm2_path):  # noqa: F811 - the fixture
    data = tmp_path / "gsm1.jsonl"
    data.write_text(json.dumps(QUESTION) + "\n", encoding="utf-8")
    models = models_file(tmp_path, ["yes", "yes"])
    cached = cache_file("smollm2-135m", QUESTION["question"], "parallel")
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(
        json.dumps(
            {
                "model": "smollm2-135m",
                "kind": "parallel",
                "question": QUESTION["question"],
                "variant": QUESTION["question"].replace(" How many", " Her brother sold 30 clips in June. How many"),
            }
        ),
        encoding="utf-8",
    )
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "tuiagent",
        "eval",
        str(data),
        "--model",
        "smollm2-135m",
        "--models",
        str(models),
        "--limit",
        "1",
        "--protocol",
        "tooltax",
        "--protocol",
        "distractors:types=parallel+hedged",
        "--judge",
        "judge",
        "--max-tokens",
        "60",
        "--max-tool-calls",
        "2",
        "--out",
        str(out),
        "-f",
        "md",
        "-f",
        "json",
        "-q",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    t = summary["datasets"]["gsm1"]["tooltax"]
    assert t["missing"] == [] and len(t["settings"]) == 7
    validity = summary["datasets"]["gsm1"]["distractor_validity"]
    assert validity["judge"] == "judge" and validity["changed"] == 0
    assert t["scope"] == "distractors" and list(t["scopes"])[0] == "pooled" and "PED" in t["scopes"]
    assert [v["kind"] for v in summary["invalid_variants"]] in ([], ["hedged"])
    kept = 2 - len(summary["invalid_variants"])  # the variants run: the judge was asked about each
    assert validity["judged"] == kept and len(t["scopes"]) == 1 + kept
    main = t["scopes"]["pooled"]
    assert all(a["units"] == kept for a in main["accuracy"].values())
    evidence = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {r["question"] for r in evidence if r["setting"] == "evidence" and r["variant"]} == {  # the clean one
        QUESTION["question"]
    }
    gap = main["deltas"]["gap"]["value"]
    acc = {k: v["accuracy"] for k, v in main["accuracy"].items()}
    assert gap == round(acc["Agent-Full"] - acc["NoTool-CoT"], 4)
    assert main["deltas"]["sty"]["value"] + main["deltas"]["frc"]["value"] + main["deltas"]["cmp"][
        "value"
    ] == pytest.approx(gap)
    markdown = (out / "summary.md").read_text(encoding="utf-8")
    for name in ("Table 2 layout", "Δsty = FCStyle − CoT", "Proto.", "Ovlp. (%)", "distractor validity"):
        assert name in markdown
