"""Where the test suite's CPU goes: sums a `pytest --cpu-log DIR` run (conftest.py) by test file, or
by test with --tests, largest first by the machine's busy CPU over each test (exact for a run with
one worker, ``-p no:xdist``; in a parallel run it counts the neighbours too, so the rows are ordered
by the tests' own and children's CPU). Usage: python bench/suite_cpu.py DIR [--tests] [--top N]."""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--tests", action="store_true", help="one row per test, not per file")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    rows = [json.loads(line) for f in sorted(args.directory.glob("*.jsonl")) for line in f.read_text().splitlines()]
    serial = len(list(args.directory.glob("*.jsonl"))) == 1
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0])
    for r in rows:
        key = r["id"] if args.tests else r["id"].split("::")[0]
        s = sums[key]
        s[0], s[1], s[2], s[3], s[4] = (
            s[0] + r["own"],
            s[1] + r["children"],
            s[2] + r.get("machine", 0.0),
            s[3] + r["wall"],
            s[4] + 1,
        )
    own, kids = sum(r["own"] for r in rows), sum(r["children"] for r in rows)
    machine, wall = sum(r.get("machine", 0.0) for r in rows), sum(r["wall"] for r in rows)
    print(f"{len(rows)} tests: {own + kids:.0f} CPU-s ({own:.0f} in the test processes, {kids:.0f} in reaped children)")
    if serial:
        print(f"the machine: {machine:.0f} busy CPU-s over {wall:.0f} s of tests")
    print(
        f"{'machine':>7} {'CPU-s':>7} {'own':>6} {'child':>6} {'wall':>7} {'n':>4}  {'test' if args.tests else 'file'}"
    )
    order = (lambda kv: -kv[1][2]) if serial else (lambda kv: -(kv[1][0] + kv[1][1]))
    for key, (o, k, m, w, n) in sorted(sums.items(), key=order)[: args.top]:
        print(f"{m:7.1f} {o + k:7.1f} {o:6.1f} {k:6.1f} {w:7.1f} {n:4d}  {key}")


if __name__ == "__main__":
    main()
