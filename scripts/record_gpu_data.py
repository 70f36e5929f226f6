"""Record the real data the CPU tests use. Run on the GPU machine from the repository root:

    PYTHONPATH=. python3 scripts/record_gpu_data.py OUTDIR

For every sample workload it writes OUTDIR/<case>/graph*.json (exports) and graph.dot (driver
dump); for the trace cases also trace.json.gz (cgtool's CUPTI trace) and records.json.gz (the raw
CUPTI records, from which tests compute expected classifications independently of cgtool's
analysis); for the Kineto case a torch.profiler trace. Each case runs in its own process so that
CUDA_DEVICE_MAX_CONNECTIONS can be set before CUDA starts and CUPTI does not block torch.profiler.
Copy OUTDIR's contents to tests/data/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

EXPORTS = {
    "chain": ("sample_workloads/chain.py", []),
    "forkjoin": ("sample_workloads/forkjoin.py", []),
    "transformer_block": ("sample_workloads/transformer_block.py", []),
    "train_step": ("sample_workloads/train_step.py", []),
    "resnet50": ("sample_workloads/resnet50.py", []),
    "gpt2_decode": ("sample_workloads/gpt2_decode.py", []),
}
TRACES = {
    # case: (workload, args, CUDA_DEVICE_MAX_CONNECTIONS)
    "forkjoin_trace": ("sample_workloads/forkjoin.py", [], None),
    "forkjoin_trace_mc1": ("sample_workloads/forkjoin.py", [], "1"),
    "forkjoin_trace_mc2": ("sample_workloads/forkjoin.py", [], "2"),
    "transformer_trace_mc1": ("sample_workloads/transformer_block.py", [], "1"),
    "chain_trace": ("sample_workloads/chain.py", ["--kernels", "40"], None),
    "train_step_trace": ("sample_workloads/train_step.py", [], None),
}


def _dump(path: Path, obj: object) -> None:
    import gzip

    data = json.dumps(obj, indent=None).encode()
    if path.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)


def do_export(workload: str, args: list[str], out: Path) -> None:
    from cgtool.capture.entrypoint import parse_target
    from cgtool.capture.runner import capture_workload

    out.mkdir(parents=True, exist_ok=True)
    cap = capture_workload(parse_target(workload), args)
    for label, data in cap.exports():
        name = "graph.json" if label == "main" else f"graph-{label}.json"
        (out / name).write_text(json.dumps(data, indent=1))
        types: dict[str, int] = {}
        for n in data["nodes"]:
            types[n["node_type"]] = types.get(n["node_type"], 0) + 1
        edges = sum(len(n["dependents"]) for n in data["nodes"])
        print(f"{out.name}/{name}: {len(data['nodes'])} nodes {types} {edges} edges "
              f"exec_id={data['exec_graph_id']} ids={data['cgtool']['id_source']} "
              f"check max|diff|={cap.max_abs_diff} ok={cap.check_ok} "
              f"capture={cap.timings.get('capture_s')} inst={cap.timings.get('instantiate_s')}")
    label, g = cap.graphs[0]
    g.debug_dump(str(out / "graph.dot"))


def do_trace(workload: str, args: list[str], out: Path) -> None:
    from cgtool.capture.entrypoint import parse_target
    from cgtool.capture.tracing import trace_workload

    out.mkdir(parents=True, exist_ok=True)
    trace, recs = trace_workload(parse_target(workload), args, replays=5)
    _dump(out / "trace.json.gz", trace)
    _dump(out / "records.json.gz", recs)
    # The join the whole project rests on: every graph node id in the trace is a node of the export.
    ids = {n["tools_id"] for g in trace["cgtool"]["graphs"] for n in g["nodes"]}
    gpu = [r for r in recs if r["kind"] != "launch" and r.get("graph_id")]
    missing = [r for r in gpu if r["graph_node_id"] not in ids]
    chans = sorted({r["channel"] for r in gpu})
    print(f"{out.name}: {len(gpu)} graph GPU records, {len(missing)} without a node in the export, "
          f"channels {chans}, dropped {trace['cgtool']['dropped_records']}, "
          f"MAX_CONNECTIONS={os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS')}")
    assert not missing, missing[:3]


def do_kineto(workload: str, args: list[str], out: Path) -> None:
    """torch.profiler trace of replays (the torch on the GPU machine writes no graph node ids)."""
    import torch

    from cgtool.capture.entrypoint import parse_target
    from cgtool.capture.runner import capture_workload
    from cgtool.capture.tracing import torch_profiler_trace

    out.mkdir(parents=True, exist_ok=True)
    cap = capture_workload(parse_target(workload), args)
    torch_profiler_trace(cap, str(out / "trace.json"), replays=3)
    # Export only after profiling: CUPTI (used for the ids on a 13.0 driver) would block Kineto.
    for label, data in cap.exports():
        (out / "graph.json").write_text(json.dumps(data, indent=1))
    raw = (out / "trace.json").read_bytes()
    import gzip

    (out / "trace.json.gz").write_bytes(gzip.compress(raw, mtime=0))
    (out / "trace.json").unlink()
    ev = json.loads(raw)["traceEvents"]
    k = [e for e in ev if e.get("cat") == "kernel"]
    print(f"{out.name}: torch {torch.__version__}, {len(k)} kernel events, arg keys {sorted(k[0]['args']) if k else None}")


def main() -> None:
    if len(sys.argv) > 2:
        what, workload, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
        args = sys.argv[4:]
        {"export": do_export, "trace": do_trace, "kineto": do_kineto}[what](workload, args, out)
        return
    outdir = Path(sys.argv[1])
    me = [sys.executable, __file__]
    failures = 0
    jobs = [("export", w, a, outdir / c, None) for c, (w, a) in EXPORTS.items()]
    jobs += [("trace", w, a, outdir / c, mc) for c, (w, a, mc) in TRACES.items()]
    jobs.append(("kineto", "sample_workloads/forkjoin.py", [], outdir / "forkjoin_kineto", None))
    jobs.append(("kineto", "sample_workloads/chain.py", ["--kernels", "40"], outdir / "chain_kineto", None))
    jobs.append(("kineto", "sample_workloads/transformer_block.py", [], outdir / "transformer_kineto", None))
    for what, w, a, out, mc in jobs:
        env = dict(os.environ)
        if mc:
            env["CUDA_DEVICE_MAX_CONNECTIONS"] = mc
        t0 = time.time()
        r = subprocess.run(me + [what, w, str(out)] + a, env=env)
        print(f"  [{what} {out.name}: rc={r.returncode} in {time.time() - t0:.1f}s]", flush=True)
        failures += r.returncode != 0
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
