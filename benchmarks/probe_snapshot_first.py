"""Why the first ``torch.cuda.memory._snapshot()`` of an eager program took seconds, and what the
allocator history costs an eager loop: one fresh process per variant, each running a small model's
forward eagerly (a few thousand allocations and frees into the history), then timing two snapshots.

    python benchmarks/probe_snapshot_first.py [--iters 300] [--out probe_snapshot_first.json]

Variants (``snapshot``: how the snapshots are taken; ``ring``: the history's ``max_entries``, 0 for
the history off; ``context``: ``_record_memory_history(context=...)``):

* ``raw``: ``torch.cuda.memory._snapshot()``, as the recorder called it before
  (``cgtool.capture.record.inputs.allocator_snapshot`` exists);
* ``guarded``: ``allocator_snapshot(torch)``, which keeps ``torch._inductor`` from being imported by
  the snapshot's symbolizer. The guarded 20,000/all process then imports ``torch._inductor`` itself
  (timed) and takes one more raw snapshot (what a compiled program's snapshot costs).

Per variant: the eager loop's time an iteration (history on vs off is the history's cost), the
events in the ring, each snapshot's wall time, and whether ``torch._inductor`` was loaded after the
first snapshot (it was not before it: the probe checks).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = [("raw", 20000, "all"), ("guarded", 20000, "all"), ("guarded", 20000, "alloc"), ("guarded", 2000, "all"),
            ("raw", 2000, "all"), ("raw", 0, "all")]


def child(snapshot: str, ring: int, context: str, iters: int, out: str) -> None:
    t0 = time.perf_counter()
    import torch

    from cgtool.capture.record.inputs import allocator_snapshot

    t_import = time.perf_counter() - t0
    torch.cuda.init()
    if ring:
        torch.cuda.memory._record_memory_history(enabled="all", context=context, stacks="python", max_entries=ring)
    hidden = 256
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.LayerNorm(hidden), torch.nn.Linear(hidden, 4 * hidden),
                                                      torch.nn.GELU(), torch.nn.Linear(4 * hidden, hidden))
                                  for _ in range(4)]).cuda().eval()
    x = torch.randn(8, hidden, device="cuda")
    with torch.no_grad():
        for _ in range(20):
            model(x)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        for _ in range(iters):
            model(x).softmax(-1)
        torch.cuda.synchronize()
        loop_us = (time.perf_counter() - t1) / iters * 1e6
    take = allocator_snapshot if snapshot == "guarded" else (lambda t: t.cuda.memory._snapshot())
    row: dict = {"snapshot": snapshot, "ring": ring, "context": context, "iters": iters, "import_torch_s": t_import,
                 "eager_iter_us": loop_us, "inductor_before": "torch._inductor" in sys.modules}
    t2 = time.perf_counter()
    snap = take(torch)
    row["first_snapshot_ms"] = (time.perf_counter() - t2) * 1e3
    row["inductor_after_first"] = "torch._inductor" in sys.modules
    row["inductor_attr_after"] = "_inductor" in vars(torch)
    row["events_in_ring"] = sum(len(t) for t in snap.get("device_traces") or [])
    row["frames_first_event"] = len(((snap.get("device_traces") or [[]])[0] or [{}])[0].get("frames") or [])
    t3 = time.perf_counter()
    take(torch)
    row["second_snapshot_ms"] = (time.perf_counter() - t3) * 1e3
    if snapshot == "guarded" and ring == 20000 and context == "all":
        t4 = time.perf_counter()
        import torch._inductor  # noqa: F401

        row["import_inductor_s"] = time.perf_counter() - t4
        t5 = time.perf_counter()
        torch.cuda.memory._snapshot()
        row["raw_snapshot_inductor_loaded_ms"] = (time.perf_counter() - t5) * 1e3
    with open(out, "w") as f:
        json.dump(row, f)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--out")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        snapshot, ring, context, out = a.child
        child(snapshot, int(ring), context, a.iters, out)
        return
    tmp = tempfile.mkdtemp(prefix="probe_snapshot_")
    rows = []
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for i, (snapshot, ring, context) in enumerate(VARIANTS):
        out = os.path.join(tmp, f"{i}.json")
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, __file__, "--iters", str(a.iters), "--child", snapshot, str(ring), context,
                            out], capture_output=True, text=True, env=env)
        if p.returncode != 0 or not os.path.exists(out):
            row = {"snapshot": snapshot, "ring": ring, "context": context, "error": p.stderr[-1500:]}
        else:
            with open(out) as f:
                row = json.load(f)
        row["process_wall_s"] = time.perf_counter() - t0
        rows.append(row)
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
    doc: dict = {"command": "python3 benchmarks/probe_snapshot_first.py --iters %d" % a.iters, "rows": rows}
    try:
        import torch

        doc["device"], doc["torch"] = torch.cuda.get_device_name(), torch.__version__
    except Exception:
        pass
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
