"""Error rates of the perf gate, from real sample distributions recorded on the GPU machine.

    python3 benchmarks/bench_gate_rates.py [tests/data/bench/reruns.json]

The file holds many unchanged reruns (each 20 block samples) of the same workloads, recorded by
``scripts/record_bench_reruns.py`` on the GPU machine. A/A: every ordered pair of reruns is
judged; the share flagged as regressed is the false-alarm rate (target < 1 %). Slowdown: every
pair with the second rerun's samples scaled by 1.03 (and 1.05) is judged; the share flagged is the
detection rate (target >= 95 % at 3 %), at the default --max-regression of 2 %. With ``--runs 3``
(the default) baseline and new each pool three disjoint reruns (2000 random draws). Each rerun is
one capture (a fresh process), so with ``--runs 3`` the gate compares the captures' ranges when they
spread wider than the blocks of one capture (``benchstats.capture_bound``); the rates of the
interquartile rule alone (``by_capture`` off) are printed beside them.
"""

from __future__ import annotations

import itertools
import json
import random
import sys
from pathlib import Path

from cgtool.artifacts.bench import WorkloadResult, merge
from cgtool.inspect.benchstats import Verdict, judge, judge_results


def pooled(runs: list[list[float]], picks: list[int], scale: float = 1.0) -> WorkloadResult:
    """The result `--runs len(picks)` would write from these reruns (each one process, one capture)."""
    return merge([WorkloadResult("w", gpu_us=tuple(x * scale for x in runs[i])) for i in picks])


def rates(runs: list[list[float]], slowdown: float, k: int = 1, trials: int = 2000, thr: float = 0.02,
          by_capture_rule: bool = True) -> tuple[int, int]:
    """Judge baseline vs new built from k pooled reruns each (disjoint), as `--runs k` does."""
    flagged = total = 0
    if k == 1:
        pairs = [([a], [b]) for a, b in itertools.permutations(range(len(runs)), 2)]
    else:
        rng = random.Random(0)
        pairs = []
        for _ in range(trials):
            pick = rng.sample(range(len(runs)), 2 * k)
            pairs.append((pick[:k], pick[k:]))
    for a, b in pairs:
        old, new = pooled(runs, a), pooled(runs, b, slowdown)
        j = (judge_results("w", old, new, max_regression=thr) if by_capture_rule
             else judge("w", old.gpu_us, new.gpu_us, max_regression=thr))
        flagged += j.verdict is Verdict.REGRESSED
        total += 1
    return flagged, total


def main(path: str, thr: float = 0.02) -> None:
    doc = json.loads(Path(path).read_text())
    print(f"{path}: recorded on {doc['environment'].get('device')}; --max-regression {100 * thr:g}%")
    for name, runs in doc["reruns"].items():
        print(f"  {name}: {len(runs)} reruns x {len(runs[0])} samples")
        for k in (1, 3):
            for s, label in ((1.0, "A/A false alarms"), (1.03, "3% slowdown caught"), (1.05, "5% slowdown caught")):
                f, t = rates(runs, s, k, thr=thr)
                f0, _ = rates(runs, s, k, thr=thr, by_capture_rule=False)
                print(f"    --runs {k}: {label:20s} {f}/{t} = {100 * f / t:.2f}%   (interquartile rule alone: "
                      f"{100 * f0 / t:.2f}%)")


if __name__ == "__main__":
    # usage: bench_gate_rates.py [RERUNS.json] [MAX_REGRESSION, e.g. 0.015]
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).parent.parent / "tests/data/bench/reruns.json"),
         float(sys.argv[2]) if len(sys.argv) > 2 else 0.02)
