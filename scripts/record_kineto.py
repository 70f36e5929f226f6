"""Record torch.profiler (Kineto) traces and `cgtool trace` (CUPTI) traces of multi-stream samples
at several CUDA_DEVICE_MAX_CONNECTIONS settings, for the CPU tests of inferred matching and of the
cost estimate. Run on the GPU machine from the repository root:

    PYTHONPATH=. python3 scripts/record_kineto.py OUTDIR [--tar FILE]

For every workload W (forkjoin, transformer_block, moe_layer; forkjoin_small, moe_small and
forkjoin_tiny with RECORD_WORKLOADS) and setting S (1, 2, default) it writes OUTDIR/<W>_kineto_mc<S>/ with

* ``trace.json.gz``: torch.profiler's chrome trace of REPLAYS replays (no graph node ids, no
  channels on torch <= 2.12), and ``graph.json``: the export of the replayed graph;
* ``cupti_trace.json.gz``: `cgtool trace` of REPLAYS replays of the same workload and setting
  (node ids and channels, graph embedded), and ``records.json.gz``: its raw CUPTI records.

Every (workload, setting, tool) runs in its own process: CUDA_DEVICE_MAX_CONNECTIONS only takes
effect before CUDA starts, and CUPTI in a process stops torch.profiler from seeing GPU work. A job
that fails or hangs is reported and the others go on; with --tar the folder is re-packed after
every job, so whatever finished comes back even if the whole run is cut short. Copy the folders to
tests/data/.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPLAYS = 20
WORKLOADS = {
    "forkjoin": ("sample_workloads/forkjoin.py", []),
    "transformer": ("sample_workloads/transformer_block.py", []),
    "moe": ("sample_workloads/moe_layer.py", []),
    # Small kernels that leave the GPU room: here the channel's order, not the GPU, limits the replay.
    "forkjoin_small": ("sample_workloads/forkjoin.py", ["--size", "256", "--depth", "4"]),
    "moe_small": ("sample_workloads/moe_layer.py", ["--capacity", "64", "--dim", "256", "--hidden", "512"]),
    # Many small kernels on eight streams (16 GEMMs of 64x64 per branch): a launch-bound replay whose
    # kernels leave most of the GPU free, so a shared channel's order shows in the timing.
    "forkjoin_tiny": ("sample_workloads/forkjoin.py", ["--size", "64", "--depth", "16"]),
}
#: What a plain run records; RECORD_WORKLOADS / RECORD_SETTINGS (comma lists) choose others.
DEFAULT_WORKLOADS = ("forkjoin", "transformer", "moe")
SETTINGS = {"1": "1", "2": "2", "def": None}
#: RECORD_REPEATS=K: K more `cgtool trace` runs of each workload at the default setting, each in a fresh
#: process, into <W>_kineto_mcdef_rep<k>/ (the run-to-run spread of the default, for docs/deps.md).
JOB_TIMEOUT_S = 120


def _gz(path: Path, obj: object) -> None:
    path.write_bytes(gzip.compress(json.dumps(obj, separators=(",", ":")).encode(), mtime=0))


def _spans(events: list[dict], key: str) -> list[float]:
    """Per-replay span (µs) of GPU events grouped by ``key`` (correlation or graph id + corr)."""
    by: dict[object, list[tuple[float, float]]] = {}
    for e in events:
        by.setdefault(e["args"][key], []).append((e["ts"], e["ts"] + e["dur"]))
    return [round(max(b for _, b in v) - min(a for a, _ in v), 1) for v in by.values()]


def do_kineto(workload: str, args: list[str], out: Path) -> None:
    import torch

    from cgtool.capture.entrypoint import parse_target
    from cgtool.capture.runner import capture_workload
    from cgtool.capture.tracing import torch_profiler_trace

    out.mkdir(parents=True, exist_ok=True)
    cap = capture_workload(parse_target(workload), args)
    raw_path = out / "trace.json"
    torch_profiler_trace(cap, str(raw_path), replays=REPLAYS, warmup=5)
    for _label, data in cap.exports():  # after profiling: CUPTI (ids) would block Kineto
        (out / "graph.json").write_text(json.dumps(data, separators=(",", ":")))
    doc = json.loads(raw_path.read_bytes())
    raw_path.unlink()
    _gz(out / "trace.json.gz", doc)
    launches = {e["args"]["correlation"] for e in doc["traceEvents"]
                if e.get("name", "").startswith("cudaGraphLaunch") and "args" in e}
    gpu = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
           and e.get("args", {}).get("correlation") in launches]
    print(f"{out.name} kineto: torch {torch.__version__}, {len(gpu)} graph GPU events in {len(launches)} "
          f"launches, spans {_spans(gpu, 'correlation')}", flush=True)


def do_cupti(workload: str, args: list[str], out: Path) -> None:
    from cgtool.capture.entrypoint import parse_target
    from cgtool.capture.tracing import trace_workload

    out.mkdir(parents=True, exist_ok=True)
    trace, recs = trace_workload(parse_target(workload), args, replays=REPLAYS, warmup=5)
    _gz(out / "cupti_trace.json.gz", trace)
    _gz(out / "records.json.gz", recs)
    gpu = [r for r in recs if r["kind"] != "launch" and r.get("graph_id")]
    chans = sorted({r["channel"] for r in gpu})
    by: dict[int, list[tuple[int, int]]] = {}
    for r in gpu:
        by.setdefault(r["correlation"], []).append((r["start"], r["end"]))
    spans = [round((max(b for _, b in v) - min(a for a, _ in v)) / 1000, 1) for v in by.values()]
    print(f"{out.name} cupti: {len(gpu)} graph GPU records, channels {chans}, dropped "
          f"{trace['cgtool']['dropped_records']}, spans {spans}", flush=True)


def _pack(outdir: Path, tar: Path | None) -> None:
    if tar is None:
        return
    tmp = tar.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as tf:
        for p in sorted(outdir.iterdir()):
            tf.add(p, arcname=p.name)
    tmp.replace(tar)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] in ("kineto", "cupti"):
        what, workload, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
        {"kineto": do_kineto, "cupti": do_cupti}[what](workload, sys.argv[4:], out)
        return
    outdir = Path(sys.argv[1])
    tar = Path(sys.argv[sys.argv.index("--tar") + 1]) if "--tar" in sys.argv else None
    budget = float(os.environ.get("RECORD_BUDGET_S", "520"))
    outdir.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, __file__]
    t_start = time.time()
    failures = 0
    # MAX_CONNECTIONS=1 and default first (the cost check needs both), 2 last.
    names = os.environ.get("RECORD_WORKLOADS", ",".join(DEFAULT_WORKLOADS)).split(",")
    tags_wanted = os.environ.get("RECORD_SETTINGS", ",".join(SETTINGS)).split(",")
    jobs = [(name, tag, what) for tags in (("1", "def"), ("2",)) for name in names for tag in tags
            if tag in tags_wanted for what in ("kineto", "cupti")]
    repeats = int(os.environ.get("RECORD_REPEATS", "0") or 0)
    jobs += [(name, f"def_rep{k}", "cupti") for k in range(1, repeats + 1) for name in names]
    for name, tag, what in jobs:
        w, a = WORKLOADS[name]
        mc = SETTINGS[tag.split("_")[0]]
        left = budget - (time.time() - t_start)
        if left < 20:
            print(f"  [skip {what} {name} mc{tag}: out of time]", flush=True)
            failures += 1
            continue
        env = dict(os.environ)
        env.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        if mc:
            env["CUDA_DEVICE_MAX_CONNECTIONS"] = mc
        out = outdir / f"{name}_kineto_mc{tag}"
        t0 = time.time()
        try:
            r = subprocess.run(me + [what, w, str(out)] + a, env=env, timeout=min(JOB_TIMEOUT_S, left))
            rc = r.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        print(f"  [{what} {out.name}: rc={rc} in {time.time() - t0:.1f}s]", flush=True)
        failures += rc != 0
        _pack(outdir, tar)
    print(f"done in {time.time() - t_start:.0f}s, {failures} failed", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
