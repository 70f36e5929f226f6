"""Record many unchanged bench reruns on the GPU machine, for the gate's error-rate measurement.

    PYTHONPATH=. python3 scripts/record_bench_reruns.py OUT.json [RERUNS]

Each rerun re-captures the workload in a fresh process (as a CI job would) and times 1000 replays
in 20 blocks. Output: {"environment": ..., "reruns": {workload: [[20 samples], ...]}}.
"""

from __future__ import annotations

import json
import subprocess
import sys

WORKLOADS = ["sample_workloads/chain.py", "sample_workloads/forkjoin.py", "sample_workloads/transformer_block.py"]


def main(out: str, reruns: int = 12) -> None:
    res: dict[str, list[list[float]]] = {w: [] for w in WORKLOADS}
    env = None
    for _ in range(reruns):
        for w in WORKLOADS:
            spec = json.dumps({"target": w, "args": [], "replays": 1000, "blocks": 20, "warmup": 20, "eager": False})
            r = subprocess.run([sys.executable, "-m", "cgtool.capture.bench", spec], capture_output=True, text=True)
            line = [x for x in r.stdout.splitlines() if x.startswith("@@CGTOOL@@")][-1]
            d = json.loads(line[len("@@CGTOOL@@"):])
            res[w].append([round(x, 4) for x in d["gpu_us"]])
            env = d["environment"]
    with open(out, "w") as f:
        json.dump({"environment": env, "reruns": res}, f)
    print(f"wrote {out}: {reruns} reruns of {len(WORKLOADS)} workloads")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 12)
