"""Error rates of the perf gate, from real sample distributions recorded on the GPU machine.

    python3 benchmarks/bench_gate_rates.py [tests/data/bench/reruns.json]

The file holds many unchanged reruns (each 20 block samples) of the same workloads, recorded by
``scripts/record_bench_reruns.py`` on the GPU machine. A/A: every ordered pair of reruns is
judged; the share flagged as regressed is the false-alarm rate (target < 1 %). Slowdown: every
pair with the second rerun's samples scaled by 1.03 (and 1.05) is judged; the share flagged is the
detection rate (target >= 95 % at 3 %), at the default --max-regression of 2 %.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

from cgtool.inspect.benchstats import Verdict, judge


def rates(runs: list[list[float]], slowdown: float) -> tuple[int, int]:
    flagged = total = 0
    for a, b in itertools.permutations(range(len(runs)), 2):
        j = judge("w", runs[a], [x * slowdown for x in runs[b]])
        flagged += j.verdict is Verdict.REGRESSED
        total += 1
    return flagged, total


def main(path: str) -> None:
    doc = json.loads(Path(path).read_text())
    print(f"{path}: recorded on {doc['environment'].get('device')}")
    for name, runs in doc["reruns"].items():
        print(f"  {name}: {len(runs)} reruns x {len(runs[0])} samples")
        for s, label in ((1.0, "A/A false alarms"), (1.03, "3% slowdown caught"), (1.05, "5% slowdown caught")):
            f, t = rates(runs, s)
            print(f"    {label:20s} {f}/{t} = {100 * f / t:.2f}%")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).parent.parent / "tests/data/bench/reruns.json"))
