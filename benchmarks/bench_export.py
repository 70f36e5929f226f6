"""Cost of a graph export against the bare cudaGraphGetNodes + cudaGraphGetEdges calls, at 1k, 10k
and 100k nodes, before (``benchmarks/export_reference.py``, the export as it was) and now.

    PYTHONPATH=. python3 benchmarks/bench_export.py [--sizes 1000,10000,100000] [--profile-dir DIR] [--check]

GPU machine, cupti-python needed on drivers before 13.1. Per size, one graph of alternating
``mul_``/``add_`` kernels (two kernel functions: names are looked up once each) is captured and
instantiated, then each case is timed ``--reps`` times (median; the cases interleaved, one call of
each per round, the order rotated):

* bare: cuda.bindings ``cudaGraphGetNodes`` + ``cudaGraphGetEdges`` (count, then fetch), the floor;
* get_graph_data: ``graph_data(with_meta=False)``, the schema of torch's ``get_graph_data()``;
* full export: ``Graph.get_graph_data(with_meta=True)``, what ``cgtool capture`` writes (grid, block,
  demangled names, environment, timings);
* the same two with the pre-issue-18 export, and the cuda.bindings-only path (up to 10k nodes);
* with ``--before FILE`` (an earlier ``cgtool/capture/export.py``, e.g. ``git show REV:cgtool/capture/export.py
  > before.py``), the same two with that export, in the same process (``--check`` compares it too).

Every case runs with the process's garbage collector as it is; a collection is made before each
timed call, the young generation is collected inside the clock right after it (the objects a call
leaves behind are the collector's work, whenever it comes: the export pauses collection while it
builds, so its share comes then), the call's result is kept until the clock has stopped (freeing
it is not timed), and the time spent in cyclic GC inside the timed calls is printed.
``--profile-dir`` writes cProfile listings of the old and new export at 10k nodes;
``--check`` compares the new export with the old one on the synthetic graphs and on every sample
workload's graphs (same JSON apart from the measured ``export_s``).

Targets: get_graph_data <= 3x bare, full export <= 4x bare, at every size.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib.util
import io
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
TARGETS = {"get_graph_data": 3.0, "full export": 4.0}


def load_reference() -> Any:
    """``benchmarks/export_reference.py`` as a module (the benchmarks folder is no package)."""
    spec = importlib.util.spec_from_file_location("export_reference", HERE / "export_reference.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class GcClock:
    """Seconds spent in cyclic garbage collection while ``on``."""

    def __init__(self) -> None:
        self.on, self.total, self._t0 = False, 0.0, 0.0
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict[str, Any]) -> None:
        if not self.on:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.total += time.perf_counter() - self._t0


def load_before(path: Path) -> Any:
    """An earlier ``cgtool/capture/export.py`` as a module of its own (it imports today's helpers)."""
    spec = importlib.util.spec_from_file_location("export_before", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["export_before"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def timed_rounds(cases: dict[str, Callable[[], Any]], reps: int, clock: GcClock) -> dict[str, tuple[float, float]]:
    """(median seconds, GC seconds per call) of every case after one warm-up call each, interleaved:
    ``reps`` rounds of one call of each case, the order rotated each round, so that the machine's
    drift reaches every case alike. A collection is made before each timed call."""
    names = list(cases)
    for name in names:
        cases[name]()  # warm-up
    ts: dict[str, list[float]] = {n: [] for n in names}
    gcs: dict[str, float] = {n: 0.0 for n in names}
    for r in range(reps):
        for name in names[r % len(names):] + names[:r % len(names)]:
            gc.collect()
            clock.total = 0.0
            clock.on = True
            t0 = time.perf_counter()
            out = cases[name]()
            gc.collect(0)  # the young objects a call leaves are the collector's work: charged to the call
            ts[name].append(time.perf_counter() - t0)
            clock.on = False
            gcs[name] += clock.total
            del out
    return {n: (statistics.median(ts[n]), gcs[n] / reps) for n in names}


def normalise(d: dict[str, Any]) -> str:
    """The export as JSON text, without the one measured field."""
    d = json.loads(json.dumps(d))
    if "cgtool" in d:
        d["cgtool"]["timings"].pop("export_s", None)
    return json.dumps(d, sort_keys=False)


def reference_graph_data(ref: Any, raw: int, exe: int, *, with_meta: bool) -> dict[str, Any]:
    """The old export as ``Graph.get_graph_data`` finished it (batch memory-op nodes renamed)."""
    d = ref.graph_data(raw, exe, with_meta=with_meta)
    try:
        from cuda.bindings import driver

        kind = int(driver.CUgraphNodeType.CU_GRAPH_NODE_TYPE_BATCH_MEM_OP)
        for n in d["nodes"]:
            if n["node_type"] == f"unknown_{kind}":
                n["node_type"] = "batch_mem_op"
    except (ImportError, AttributeError):
        pass
    return d


def same_export(ref: Any, raw: int, exe: int, what: str, before: Any = None) -> bool:
    from cgtool.capture.export import graph_data

    ok = True
    for meta in (False, True):
        new = normalise(graph_data(raw, exe, with_meta=meta))
        old = normalise(reference_graph_data(ref, raw, exe, with_meta=meta))
        slow = normalise(graph_data(raw, exe, with_meta=meta, impl="bindings"))
        by_map = normalise(graph_data(raw, exe, with_meta=meta, impl="map"))
        prev = normalise(before.graph_data(raw, exe, with_meta=meta)) if before is not None else new
        if not new == old == slow == by_map == prev:
            ok = False
            print(f"  check {what} (with_meta={meta}): DIFFERENT (new {len(new)} chars, old {len(old)}, "
                  f"bindings path {len(slow)}, map {len(by_map)}, --before {len(prev)})")
    if ok:
        print(f"  check {what}: new export == old export == cuda.bindings path == column reads"
              f"{' == --before' if before is not None else ''} (JSON, with and without meta)")
    return ok


def build(n: int) -> Any:
    import torch

    from cgtool.capture.graph import Graph, graph

    x = torch.ones(32, device="cuda")
    g = Graph(keep_graph=True)
    with graph(g):
        for _ in range(n // 2):  # two kernel functions, alternating
            x.mul_(1.0)
            x.add_(0.0)
    g.instantiate()
    return g, x


def per_call_costs(raw: int, ref: Any) -> None:
    """Per-node call cost of each per-node driver/CUPTI call, to see where an export's time goes."""
    from cupti import cupti as cp

    from cgtool.capture import _fastcuda

    fast, fc = _fastcuda.load(), ref.load_cupti()
    if fast is None:
        return
    hs = fast.nodes(raw)
    t_int, kp, idv = ctypes.c_int(), _fastcuda.KernelParamsV2(), ctypes.c_uint64()
    tp, kpp, ip = ctypes.addressof(t_int), ctypes.addressof(kp), ctypes.addressof(idv)
    calls: dict[str, Callable[[int], Any] | None] = {
        "cupti.get_graph_node_id (cupti-python)": lambda h: cp.get_graph_node_id(h),
        "cuptiGetGraphNodeId (ctypes, byref)": (lambda h: fc.node_id_fn(h, ctypes.byref(idv))) if fc else None,
        "cuptiGetGraphNodeId (ctypes, address)": (lambda h: fc.node_id_fn(h, ip)) if fc else None,
        "cuGraphNodeGetType (ctypes, address)": lambda h: fast.get_type(h, tp),
        "cuGraphKernelNodeGetParams_v2 (ctypes)": lambda h: fast.kparams(h, kpp),
        "empty Python call (loop floor)": lambda h: None,
    }
    for name, fn in calls.items():
        if fn is None:
            continue
        t0 = time.perf_counter()
        for h in hs:
            fn(h)
        print(f"  per call: {name:42s} {(time.perf_counter() - t0) / len(hs) * 1e6:6.3f} µs")
    size = ctypes.sizeof(_fastcuda.KernelParamsV2)
    arr = (_fastcuda.KernelParamsV2 * len(hs))()
    base = ctypes.addressof(arr)
    t0 = time.perf_counter()
    list(map(fast.kparams, hs, range(base, base + len(hs) * size, size)))
    t1 = time.perf_counter()
    list(map(cp.get_graph_node_id, hs))
    t2 = time.perf_counter()
    print(f"  per node, by map(): cuGraphKernelNodeGetParams_v2 {(t1 - t0) / len(hs) * 1e6:6.3f} µs, "
          f"cupti.get_graph_node_id {(t2 - t1) / len(hs) * 1e6:6.3f} µs")
    t0 = time.perf_counter()
    fast.nodes(raw)
    t1 = time.perf_counter()
    fast.edges(raw)
    t2 = time.perf_counter()
    print(f"  ctypes cuGraphGetNodes {1e3 * (t1 - t0):.2f} ms, cuGraphGetEdges_v2 {1e3 * (t2 - t1):.2f} ms "
          f"({len(hs)} nodes)")


def profiles(ref: Any, g: Any, out: io.StringIO) -> None:
    import cProfile
    import pstats

    from cgtool.capture.export import graph_data

    raw, exe = g.raw_cuda_graph(), g.raw_cuda_graph_exec()
    cases = {
        "before: graph_data(with_meta=False)": lambda: ref.graph_data(raw, exe, with_meta=False),
        "before: graph_data(with_meta=True)": lambda: ref.graph_data(raw, exe, with_meta=True),
        "after: graph_data(with_meta=False)": lambda: graph_data(raw, exe, with_meta=False),
        "after: Graph.get_graph_data(with_meta=True)": lambda: g.get_graph_data(with_meta=True),
    }
    for name, fn in cases.items():
        fn()
        gc.collect()
        prof = cProfile.Profile()
        prof.runcall(fn)
        out.write(f"\n===== {name}\n")
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(14)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--profile-dir", type=Path, default=None)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    ap.add_argument("--before", type=Path, default=None, help="an earlier export.py to time beside this one")
    a = ap.parse_args()
    import torch
    from cuda.bindings import runtime as rt

    from cgtool.capture.export import graph_data

    ref = load_reference()
    before = load_before(a.before) if a.before is not None else None
    clock = GcClock()
    sizes = [int(s) for s in a.sizes.split(",")]
    rows: list[dict[str, Any]] = []
    ok = True  # every export equal to the old one
    met = True  # every target met
    for n in sizes:
        g, _keep = build(n)
        raw, exe = g.raw_cuda_graph(), g.raw_cuda_graph_exec()
        gh = rt.cudaGraph_t(init_value=raw)

        def bare() -> Any:
            _, _, num = rt.cudaGraphGetNodes(gh, numNodes=0)
            nodes = rt.cudaGraphGetNodes(gh, numNodes=num)
            r = rt.cudaGraphGetEdges(gh, numEdges=0)
            return nodes, rt.cudaGraphGetEdges(gh, numEdges=r[-1])

        cases: dict[str, Callable[[], Any]] = {
            "bare": bare,
            "get_graph_data": lambda: graph_data(raw, exe, with_meta=False),
            "full export": lambda: g.get_graph_data(with_meta=True),
            "before: get_graph_data": lambda: ref.graph_data(raw, exe, with_meta=False),
            "before: full export": lambda: reference_graph_data(ref, raw, exe, with_meta=True),
        }
        if before is not None:
            cases["--before: get_graph_data"] = lambda: before.graph_data(raw, exe, with_meta=False)
            cases["--before: graph_data(meta)"] = lambda: before.graph_data(raw, exe, with_meta=True)
            cases["now: graph_data(meta)"] = lambda: graph_data(raw, exe, with_meta=True)
        if n <= 10_000:
            cases["cuda.bindings path"] = lambda: graph_data(raw, exe, with_meta=False, impl="bindings")
        nodes = len(graph_data(raw, exe, with_meta=False)["nodes"])
        print(f"\n{nodes} nodes on {torch.cuda.get_device_name()} (median of {a.reps}):")
        if a.check:
            ok &= same_export(ref, raw, exe, f"synthetic {nodes}-node graph", before)
        if n == 10_000 or len(sizes) == 1:
            per_call_costs(raw, ref)
            if a.profile_dir is not None:
                buf = io.StringIO()
                profiles(ref, g, buf)
                a.profile_dir.mkdir(parents=True, exist_ok=True)
                (a.profile_dir / f"export_profiles_{nodes}.txt").write_text(buf.getvalue())
                print(f"  cProfile listings: {a.profile_dir / f'export_profiles_{nodes}.txt'}")
        res = timed_rounds(cases, a.reps, clock)
        base = res["bare"][0]
        for name, (t, gct) in res.items():
            target = TARGETS.get(name)
            verdict = "" if target is None else ("  target met" if t / base <= target else f"  MISSED (<= {target}x)")
            print(f"  {name:24s} {t * 1e3:9.2f} ms  {t / nodes * 1e6:6.2f} µs/node  {t / base:6.2f}x bare"
                  f"  (GC {gct * 1e3:7.2f} ms){verdict}")
            if target is not None and t / base > target:
                met = False
        rows.append({"nodes": nodes, **{k: v[0] for k, v in res.items()}, **{f"gc {k}": v[1] for k, v in res.items()}})
        del g, _keep, cases
        gc.collect()
        torch.cuda.empty_cache()
    if len(rows) > 1:
        print("\nscaling (time per node; exponent k of time ~ nodes^k between consecutive sizes):")
        for name in [k for k in rows[0] if k != "nodes" and not k.startswith("gc ") and all(k in r for r in rows)]:
            per = "  ".join(f"{r[name] / r['nodes'] * 1e6:6.2f}" for r in rows)
            ks = "  ".join(f"{math.log(b[name] / a_[name]) / math.log(b['nodes'] / a_['nodes']):4.2f}"
                           for a_, b in zip(rows, rows[1:]))
            print(f"  {name:24s} µs/node {per}   k {ks}")
    if a.check:
        ok &= check_samples(ref, before)
    if a.json is not None:
        a.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    print(f"\ntargets: {'all met' if met else 'SOME MISSED'}" + (
        f"; exports: {'all equal to the old ones' if ok else 'SOME DIFFER'}" if a.check else ""))
    return 0 if ok and met else 1


def check_samples(ref: Any, before: Any = None) -> bool:
    """The new export equals the old one on every sample workload's graphs."""
    from cgtool.capture.entrypoint import parse_target
    from cgtool.capture.runner import capture_workload

    ok = True
    root = HERE.parent / "sample_workloads"
    for w in ("chain", "forkjoin", "transformer_block", "train_step", "moe_layer", "gpt2_decode", "resnet50"):
        try:
            cap = capture_workload(parse_target(str(root / f"{w}.py")), [], check=False)
        except Exception as e:  # a sample whose extra package is missing here
            print(f"  check {w}: not captured ({type(e).__name__}: {str(e)[:100]})")
            continue
        for label, g in cap.graphs:
            ok &= same_export(ref, g.raw_cuda_graph(), g.raw_cuda_graph_exec(), f"{w}/{label}", before)
    return ok


if __name__ == "__main__":
    sys.exit(main())
