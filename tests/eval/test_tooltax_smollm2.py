"""`tuiagent eval --protocol tooltax --distractors` end to end on the real SmolLM2-135M (it writes the
distractor variant and runs the seven conditions in real kernels), with a scripted judge checking
that the variant keeps its answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.backends.conftest import smollm2_path  # noqa: F401 - a fixture
from tests.eval.test_cue_probe import models_file

pytestmark = pytest.mark.slow

QUESTION = {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in "
                        "May. How many clips did Natalia sell altogether in April and May?",
            "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
                      "altogether in April and May.\n#### 72"}


def test_the_protocol_with_distractors_on_smollm2(tmp_path: Path, smollm2_path):  # noqa: F811 - the fixture
    data = tmp_path / "gsm1.jsonl"
    data.write_text(json.dumps(QUESTION) + "\n", encoding="utf-8")
    models = models_file(tmp_path, ["yes"])
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "tuiagent", "eval", str(data), "--model", "smollm2-135m", "--models", str(models),
           "--limit", "1", "--protocol", "tooltax", "--distractors", "--distractor-type", "parallel",
           "--judge", "judge", "--max-tokens", "60", "--max-tool-calls", "2", "--out", str(out),
           "-f", "md", "-f", "json", "-q"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    t = summary["datasets"]["gsm1"]["tooltax"]
    assert t["missing"] == [] and len(t["settings"]) == 7
    assert summary["distractor_validity"]["judge"] == "judge"
    if summary["invalid_variants"]:  # the model lost a number of the question: the clean questions only
        assert t["scope"] == "clean"
    else:
        assert t["scope"] == "distractors" and list(t["scopes"]) == ["pooled", "PED"]
        assert summary["distractor_validity"] == {"judge": "judge", "judged": 1, "changed": 0, "unparseable": 0}
    main = next(iter(t["scopes"].values()))
    assert all(a["units"] == 1 for a in main["accuracy"].values())
    gap = main["deltas"]["gap"]["value"]
    acc = {k: v["accuracy"] for k, v in main["accuracy"].items()}
    assert gap == round(acc["Agent-Full"] - acc["NoTool-CoT"], 4)
    assert main["deltas"]["sty"]["value"] + main["deltas"]["frc"]["value"] + main["deltas"]["cmp"]["value"] == \
        pytest.approx(gap)
    markdown = (out / "summary.md").read_text(encoding="utf-8")
    for name in ("Table 2 layout", "Δsty = FCStyle − CoT", "Proto.", "Ovlp. (%)", "distractor validity"):
        assert name in markdown
