"""Record many unchanged bench reruns on the GPU machine, for the gate's error-rate measurement.

    PYTHONPATH=. python3 scripts/record_bench_reruns.py OUT.json [RERUNS]

Each rerun re-captures the workload in a fresh process (as a CI job would: cgtool's own bench
process, ``cgtool.capture.bench`` through ``child.run_child``) and times 1000 replays in 20 blocks.
Output: {"environment": ..., "spec": {...}, "reruns": {workload: [[20 samples], ...]}}, read by
``benchmarks/bench_gate_rates.py``.
"""

from __future__ import annotations

import json
import sys

from cgtool.artifacts.bench import BenchSpec
from cgtool.capture.bench import bench_pooled

WORKLOADS = ["sample_workloads/chain.py", "sample_workloads/forkjoin.py", "sample_workloads/transformer_block.py"]


def main(out: str, reruns: int = 12) -> None:
    spec = BenchSpec(replays=1000, blocks=20, warmup=20, eager=False)
    res: dict[str, list[list[float]]] = {w: [] for w in WORKLOADS}
    env = None
    for _ in range(reruns):
        for w in WORKLOADS:
            r = bench_pooled(w, [], spec, 1)
            if r.failed:
                raise SystemExit(f"{w}: {r.error}")
            res[w].append([round(x, 4) for x in r.gpu_us])
            env = dict(r.environment)
    with open(out, "w") as f:
        json.dump({"environment": env, "spec": spec.to_json(), "reruns": res}, f)
    print(f"wrote {out}: {reruns} reruns of {len(WORKLOADS)} workloads")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 12)
