"""`cgtool trace` on every sample workload, checked: run on the GPU machine from the repo root.

    PYTHONPATH=. python3 scripts/validate_traces.py OUTDIR

For each sample (and fork/join again with CUDA_DEVICE_MAX_CONNECTIONS=1): the file is a chrome trace
in object form with metadata events; every GPU node of the embedded export appears exactly once per
replay with its node id and a channel; every graph node id joins the export; no record was
dropped; with CUDA_DEVICE_MAX_CONNECTIONS=1 every graph event is on one channel. Prints one line a
workload and exits 1 if any check fails.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

SAMPLES = ["chain", "forkjoin", "transformer_block", "train_step", "resnet50", "gpt2_decode"]


def check(path: Path, one_channel: bool) -> list[str]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    bad = []
    if not isinstance(doc.get("traceEvents"), list) or not any(e.get("ph") == "M" for e in doc["traceEvents"]):
        bad.append("not a chrome trace with metadata")
    meta = doc["cgtool"]
    nodes = {n["tools_id"]: n for g in meta["graphs"] for n in g["nodes"]}
    gpu_nodes = {t for t, n in nodes.items() if n["node_type"] in ("kernel", "memcpy", "memset")}
    ev = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
          and "graph id" in e.get("args", {})]
    per_replay: dict[int, Counter] = {}
    for e in ev:
        a = e["args"]
        if a["graph node id"] not in nodes:
            bad.append(f"node id {a['graph node id']} not in the export")
        if "channel" not in a:
            bad.append("an event without a channel")
        per_replay.setdefault(a["correlation"], Counter())[a["graph node id"]] += 1
    for corr, c in per_replay.items():
        graph = {t >> 32 for t in c}
        expect = {t for t in gpu_nodes if t >> 32 in graph}
        if set(c) != expect or set(c.values()) != {1}:
            bad.append(f"replay {corr}: {len(c)} of {len(expect)} nodes, counts {sorted(set(c.values()))}")
    if meta.get("dropped_records"):
        bad.append(f"{meta['dropped_records']} records dropped")
    chans = {e["args"]["channel"] for e in ev}
    if one_channel and len(chans) != 1:
        bad.append(f"channels {sorted(chans)} with CUDA_DEVICE_MAX_CONNECTIONS=1")
    return bad + [f"ok: {len(ev)} graph events, {len(per_replay)} replays, channels {sorted(chans)}"]


def main(outdir: str) -> None:
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    jobs = [(s, None) for s in SAMPLES] + [("forkjoin", "1"), ("transformer_block", "1")]
    for s, mc in jobs:
        p = out / f"{s}{'_mc' + mc if mc else ''}.json.gz"
        args = [sys.executable, "-m", "cgtool", "trace", f"sample_workloads/{s}.py", "-o", str(p), "--force"]
        if mc:
            args += ["--max-connections", mc]
        r = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ))
        if r.returncode != 0:
            print(f"{p.name}: trace failed ({r.returncode}): {r.stderr.strip()[-300:]}")
            failed += 1
            continue
        res = check(p, mc == "1")
        failed += len(res) > 1
        print(f"{p.name}: " + "; ".join(res))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main(sys.argv[1])
