"""``eval --report-only DIR DIR... --out MERGED``: the shards of one eval merged into one directory.

The shards (``eval --shard I/N``, ``eval.shards``) must be of one eval: the same model, datasets,
settings (by fingerprint), seeds, budgets and sampling, cut from the same problem list into the
same N; they must be disjoint (no shard twice, no run twice) and complete (every shard there).
What differs is refused with the key and the directories; problems of a shard with no run yet
are listed, and the report is still written. The merged directory holds a ``results.jsonl``, an
``eval.json`` and the shards' judgements (``judgements.jsonl``: the cue probe's and the TIM
protocol's) like an unsharded eval's, so ``--report-only MERGED`` reads it again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tuiagent.core.judge_store import JUDGEMENTS, JudgementStore
from tuiagent.eval.protocols import installed
from tuiagent.eval.results import RESULTS, ResultsError, ResultStore

# manifest keys every shard of one eval has equal (eval.harness.run_eval writes them; each protocol
# names its own, ``same_in_shards``)
SAME = ("model", "backend", "datasets", "seeds", "limit", "offset", "run", "sampling")


def _fingerprints(manifest: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s.get("fingerprint", "") for s in manifest.get("settings", [])}


def _read(directory: Path) -> tuple[dict[str, Any], ResultStore]:
    store = ResultStore(directory)
    manifest = store.manifest()
    if manifest is None:
        raise ResultsError(f"{directory} is not an eval's results directory (it has no eval.json)")
    if not manifest.get("shard"):
        raise ResultsError(
            f"{directory} is not a shard (it was run without --shard I/N)\n"
            "  fix: merge only the directories of `tuiagent eval ... --shard I/N` runs"
        )
    return manifest, store


def check(dirs: list[Path], manifests: list[dict[str, Any]]) -> None:
    """Refuse shards that are not one eval's, or that overlap or leave a shard out."""
    first = manifests[0]
    for directory, manifest in zip(dirs[1:], manifests[1:], strict=True):
        for key in (*SAME, *(k for p in installed() for k in p.same_in_shards)):
            if manifest.get(key) != first.get(key):
                raise ResultsError(
                    f"{dirs[0]} and {directory} are not shards of one eval: their {key} differ "
                    f"({first.get(key)!r} vs {manifest.get(key)!r})"
                )
        if _fingerprints(manifest) != _fingerprints(first):
            raise ResultsError(
                f"{dirs[0]} and {directory} are not shards of one eval: their settings differ "
                f"({', '.join(sorted(_fingerprints(first)))} vs "
                f"{', '.join(sorted(_fingerprints(manifest)))}, or defined differently)"
            )
        for key in ("count", "selection"):
            if manifest["shard"][key] != first["shard"][key]:
                raise ResultsError(
                    f"{dirs[0]} and {directory} were cut from different problem lists or into a "
                    f"different number of shards (shard {key} differs)"
                )
    count = first["shard"]["count"]
    seen: dict[int, Path] = {}
    for directory, manifest in zip(dirs, manifests, strict=True):
        index = manifest["shard"]["index"]
        if index in seen:
            raise ResultsError(f"shard {index}/{count} is given twice: {seen[index]} and {directory}")
        seen[index] = directory
    missing = [f"{i}/{count}" for i in range(1, count + 1) if i not in seen]
    if missing:
        selected = first["shard"]["selected"]
        raise ResultsError(
            f"shard(s) {', '.join(missing)} missing: the merge would lack the problems at those "
            f"places (every {count}-th of the {selected} selected)\n"
            "  fix: run them with --shard and pass their directories too"
        )


def merge_shards(dirs: list[Path], out: Path) -> list[str]:
    """Check the shards in ``dirs`` and write their merged results into ``out``; returns what is
    incomplete (problems of a shard with no run), one line each."""
    read = [_read(d) for d in dirs]
    manifests = [m for m, _ in read]
    check(dirs, manifests)
    if any(out.resolve() == d.resolve() for d in dirs):
        raise ResultsError(f"--out {out} is one of the shards; give a new directory for the merge")
    target = ResultStore(out)
    existing = target.manifest()
    if existing is not None and "merged_from" not in existing:
        raise ResultsError(f"{out} holds an eval of its own; give a new directory for the merge")
    records: dict[str, dict[str, Any]] = {}
    incomplete: list[str] = []
    for directory, (manifest, store) in zip(dirs, read, strict=True):
        for key, record in store.records.items():
            if key in records:
                raise ResultsError(f"run {key} is in two shards (the second: {directory})")
            records[key] = record
        ran = {f"{r['dataset']}/{r['problem_id']}" for r in store.records.values()}
        shard = manifest["shard"]
        lacking = [u for u in shard["problems"] if u not in ran]
        if lacking:
            incomplete.append(
                f"shard {shard['index']}/{shard['count']} ({directory}): {len(lacking)} problem(s) "
                f"with no run: {', '.join(lacking[:10])}{' ...' if len(lacking) > 10 else ''}"
            )
    out.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records.values())
    (out / RESULTS).write_text(lines, encoding="utf-8")
    judged = {k: r for d in dirs for k, r in JudgementStore(d).latest.items()}  # each shard's judge cache
    if judged:
        (out / JUDGEMENTS).write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in judged.values()), encoding="utf-8"
        )
    merged = {
        **manifests[0],
        "shard": None,
        "merged_from": [str(d) for d in dirs],
        "sessions": [s for m in manifests for s in m.get("sessions", [])],
        "invalid_variants": [v for m in manifests for v in m.get("invalid_variants", [])],
        **{k: v for p in installed() for k, v in p.merged(manifests).items()},
    }
    target.write_manifest(merged)
    return incomplete
