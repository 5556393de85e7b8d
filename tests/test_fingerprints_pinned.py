"""The fingerprints an eval directory resumes by (``results.jsonl``'s ``setting_fp``), pinned: the
values below were computed by the code before settings became a ``RunSpec`` (commit fbbc67b), so a
refactor that changes what a setting hashes to fails here instead of refusing to resume old results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuiagent.presets import calibrated_presets, load_preset_file, load_presets, parse_config, shipped_presets_file

ROOT = Path(__file__).resolve().parent.parent
EVAL_BASE = {"run": {}, "sampling": {}}  # what an eval with no eval-wide budgets or sampling hashes with
OTHER_BASE = {"run": {"max_tool_calls": 2}, "sampling": {"temperature": 0.7}}

SHIPPED = {
    "recommended": "6d57c2c7382d",
    "flag-only": "6d57c2c7382d",
    "light": "c4a1c65a358b",
    # added beside the RunSpec refactor, pinned from their own branches' pre-RunSpec code
    "tim-prompt": "6673236e52f0",
    "gstep-critic": "9e57fe346f14",
}

# text -> (fingerprint(), fingerprint(OTHER_BASE))
STRINGS = {
    "none": ("bde0d05808a4", "ac2792de971c"),
    "full": ("bde0d05808a4", "ac2792de971c"),
    "all": ("db8e24ee024a", "6227e95f7b83"),
    "cot": ("150ce2aa009a", "84dbd254594a"),
    "noop": ("d0e707c1ba88", "fa4e3703fdeb"),
    "oracle": ("ed41e81a4ec3", "43bfb1f34f27"),
    "max1": ("46b1d6cc3ec3", "b96f0d9f7f0c"),
    "fcstyle": ("6b1672a31c7c", "89143d97de3f"),  # these two from the tool-use-tax branch's pre-RunSpec code
    "evidence": ("43fd3301a47a", "8001ed04117b"),
    "attc": ("48714bf4dc7e", "9e8e98167467"),
    "attc+prunetir:attc.threshold=0.9": ("2b8d13d0ad03", "dddc731efa1e"),
    "full:max_tool_calls=8": ("491102fcb00c", "8d325fe5f08f"),
    "none:max_tool_calls=8": ("11c0edeba703", "4e4180fd0ce2"),
    "noop+attc": ("b7a5a08c76b0", "33275e5b1379"),
    "attc+prunetir:attc.threshold=0.9,prunetir.turn_limit=2,max_tool_calls=6,temperature=0.7": (
        "5136240ada48",
        "c698bcfdea2d",
    ),
    "cot:mode=cot": ("150ce2aa009a", "84dbd254594a"),
    "oracle:exec_timeout_s=2.5,output_chars=300,max_wall_s=120,max_tokens=2048,top_p=0.9,top_k=40,repeat_penalty=1.1": (
        "051c0dd7631a",
        "980dab22039a",
    ),
}


def test_shipped_and_calibrated_presets_keep_their_fingerprints():
    shipped = load_preset_file(shipped_presets_file())
    assert {name: p.fingerprint() for name, p in shipped.items()} == SHIPPED
    assert calibrated_presets(None)["recommended"].fingerprint() == SHIPPED["recommended"]


@pytest.mark.parametrize("text", list(STRINGS))
def test_parsed_strings_keep_their_fingerprints(text):
    setting = parse_config(text)
    assert (setting.fingerprint(), setting.fingerprint(OTHER_BASE)) == STRINGS[text]


@pytest.mark.parametrize(
    "directory", sorted(p.parent for p in (ROOT / "docs" / "results").glob("*/eval.json")), ids=lambda p: p.name
)
def test_the_repos_eval_directories_would_resume(directory):
    """Each setting of each shipped results directory hashes to what its manifest recorded."""
    manifest = json.loads((directory / "eval.json").read_text(encoding="utf-8"))
    base = {"run": manifest.get("run", {}), "sampling": manifest.get("sampling", {})}
    named = load_presets(model=manifest["model"])
    for described in manifest["settings"]:
        assert parse_config(described["name"], named).fingerprint(base) == described["fingerprint"], described["name"]
