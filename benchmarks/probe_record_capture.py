"""Where `cgtool record`'s capture+instantiate overhead goes, configuration by configuration, in one process.

    python benchmarks/probe_record_capture.py [--rounds 7] [--layers 24] [--out probe_record_capture.json]
    python benchmarks/probe_record_capture.py --model gpt2 --configs bare,c_noop,recorder   # a real model

Captures the server runner's model (tests/programs/server_runner.py: LAYERS blocks, batch sizes 8, 4,
2, 1 sharing one pool; or with ``--model gpt2`` the GPT-2 decode step of
sample_workloads/gpt2_decode.py, captured four times) under each configuration in turn, rotating the order every round, and prints
the median capture+instantiate time per graph (the `with torch.cuda.graph(...)` block plus a
synchronize, as the runner times it) and its ratio to the bare capture:

* ``bare``: no CUPTI subscriber;
* ``subscribed``: a subscriber with nothing enabled;
* ``c_noop``: the recorder's callbacks enabled, handled by a C function that returns at once
  (compiled here with the system C compiler; left out if there is none): what CUPTI and the
  driver cost with no Python at all;
* ``py_noop``: the same callbacks, a Python (ctypes) function that returns at once;
* ``py_frames``: node callbacks keep the recorder's raw frames (``attribution.grab_node_info``);
* ``py_export``: and the exec-created callback reads the topology (``export.graph_data``);
* ``recorder``: the recorder itself (``Recorder.start()`` ... ``finish()``), writer thread included,
  with its compiled node callback where it is built, and its input checks on as by default (the
  allocator's history on while it records; off again after); ``recorder_nochecks``: without them
  (``--check-inputs 0``); ``recorder_py``: with its Python callback
  (``RecordOptions(subscriber="ctypes")``); ``recorder_nodefer``: the Python callback and a writer
  that writes each graph at once (``writer_quiet_s=0``); ``recorder_map``: the
  recorder reading each graph column by column from Python (``read_graph(impl="map")``, the read
  before the compiled one); ``recorder_noreserved``: without reading the memory taken at capture
  begin and instantiation; ``recorder_torchstats``: reading it from torch's allocator statistics
  (as the recorder did before it counted allocations in its compiled callback; both figures are
  printed per graph).

For each recorder configuration, the time inside its callbacks per callback id and per graph, and
the phases of the graph-exec callback, are printed too (``--configs`` picks configurations).

And the node callback's parts, each alone: ``py_getframe`` (``sys._getframe``), ``py_grab``
(``attribution.grab``: code and lasti per frame), ``py_grabnode`` (``grab_node``: and the module);
``node_us`` is the time inside ``grab_node_info`` per node, timed in the callback.

GPU only. One process: every configuration sees the same allocator state (see the README on
process state and timings).
"""
from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402


_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)


def _runner() -> Any:
    """tests/programs/server_runner.py as a module (its Model; its LAYERS is set by the caller)."""
    spec = importlib.util.spec_from_file_location("server_runner", os.path.join(ROOT, "tests", "programs",
                                                                                 "server_runner.py"))
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    argv, sys.argv = sys.argv, sys.argv[:1]  # it reads its layer count from argv at import
    try:
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
    finally:
        sys.argv = argv
    return mod


def _c_noop() -> ctypes.CDLL | None:
    src = "void cb(void *u, int d, unsigned c, const void *p) { (void)u; (void)d; (void)c; (void)p; }\n"
    tmp = tempfile.mkdtemp()
    try:
        with open(os.path.join(tmp, "noop.c"), "w") as f:
            f.write(src)
        so = os.path.join(tmp, "noop.so")
        for cc in ("cc", "gcc", "clang"):
            if shutil.which(cc) and subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", so,
                                                    os.path.join(tmp, "noop.c")]).returncode == 0:
                return ctypes.CDLL(so)
        return None
    finally:
        pass


class Sub:
    """A bare CUPTI subscriber through ctypes, with the recorder's callbacks enabled or not."""

    def __init__(self, lib: ctypes.CDLL, cupti: object, fn: object, enable: bool) -> None:
        self.lib = lib
        lib.cuptiSubscribe.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p]
        lib.cuptiSubscribe.restype = ctypes.c_int
        lib.cuptiEnableCallback.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
        lib.cuptiUnsubscribe.argtypes = [ctypes.c_void_p]
        self.fn = fn
        self.h = ctypes.c_void_p()
        addr = ctypes.cast(fn, ctypes.c_void_p).value
        rc = lib.cuptiSubscribe(ctypes.byref(self.h), addr, None)
        if rc:
            raise SystemExit(f"cuptiSubscribe: {rc}")
        if enable:
            for d, c in recorder_callbacks(cupti):
                lib.cuptiEnableCallback(1, self.h, d, c)

    def close(self) -> None:
        self.lib.cuptiUnsubscribe(self.h)


def recorder_callbacks(cupti: object) -> list[tuple[int, int]]:
    c: object = cupti
    R, D = c.CallbackIdResource, c.CallbackDomain  # type: ignore[attr-defined]
    out = [(int(D.RESOURCE), int(getattr(R, n))) for n in
           ("GRAPHNODE_CREATED", "GRAPHNODE_CLONED", "GRAPHEXEC_CREATED", "GRAPHEXEC_DESTROY_STARTING",
            "GRAPH_DESTROY_STARTING")]
    for name, v in c.runtime_api_trace_cbid.__members__.items():  # type: ignore[attr-defined]
        if name.startswith(("cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaGraphInstantiate")):
            out.append((int(D.RUNTIME_API), int(v)))
    for name, v in c.driver_api_trace_cbid.__members__.items():  # type: ignore[attr-defined]
        if name.startswith("cuGraphLaunch"):
            out.append((int(D.DRIVER_API), int(v)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--out", default="probe_record_capture.json")
    ap.add_argument("--configs", default="", help="comma-separated configurations (default: all)")
    ap.add_argument("--model", choices=("runner", "gpt2"), default="runner",
                    help="runner: the server runner's model, batch sizes 8, 4, 2, 1 (4 graphs a round); gpt2: "
                         "sample_workloads/gpt2_decode.py's decode step (GPT-2 small, random weights, ~300 "
                         "nodes), captured 4 times a round into one pool")
    a = ap.parse_args()

    from cupti import cupti

    from cgtool.capture.export import graph_data
    from cgtool.capture.record import _subscriber, attribution
    from cgtool.capture.record.recorder import Recorder

    lib = _subscriber.load_libcupti(cupti)
    R, D = cupti.CallbackIdResource, cupti.CallbackDomain
    NODE, EXEC, RES = int(R.GRAPHNODE_CREATED), int(R.GRAPHEXEC_CREATED), int(D.RESOURCE)
    L = _subscriber.Layout(cupti)

    def ptr(addr: int) -> int:
        return ctypes.c_void_p.from_address(addr).value or 0

    keep: list[object] = []

    def py_noop(u: object, d: int, c: int, p: object) -> None:
        return None

    inside = [0, 0]

    def py_frames(u: object, d: int, c: int, p: object) -> None:
        if d == RES and c == NODE:
            t0 = time.perf_counter_ns()
            keep.append(attribution.grab_node_info(sys._getframe(1)))
            inside[0] += time.perf_counter_ns() - t0
            inside[1] += 1

    def py_getframe(u: object, d: int, c: int, p: object) -> None:
        if d == RES and c == NODE:
            keep.append(sys._getframe(1).f_code)

    def py_grab(u: object, d: int, c: int, p: object) -> None:
        if d == RES and c == NODE:
            keep.append(attribution.grab(sys._getframe(1)))

    def py_grabnode(u: object, d: int, c: int, p: object) -> None:
        if d == RES and c == NODE:
            keep.append(attribution.grab_node(sys._getframe(1)))

    def py_export(u: object, d: int, c: int, p: object) -> None:
        if d == RES:
            if c == NODE:
                keep.append(attribution.grab_node_info(sys._getframe(1)))
            elif c == EXEC and p:
                desc = ptr(p + L.desc)  # type: ignore[operator]
                keep.append(graph_data(ptr(desc + L.graph), ptr(desc + L.exec), with_environment=False))

    cfuncs = {"py_noop": _CB(py_noop), "py_frames": _CB(py_frames), "py_export": _CB(py_export),
              "py_getframe": _CB(py_getframe), "py_grab": _CB(py_grab), "py_grabnode": _CB(py_grabnode)}
    cnoop = _c_noop()
    configs = ["bare", "subscribed", "py_noop", "py_getframe", "py_grab", "py_grabnode", "py_frames", "py_export",
               "recorder", "recorder_py", "recorder_nodefer", "recorder_nochecks"]
    if cnoop is not None:
        configs.insert(2, "c_noop")
    configs += ["recorder_map", "recorder_noreserved", "recorder_torchstats"]
    growth: dict[str, list[int | None]] = {}  # config -> reserved_during_capture of the last round's graphs
    if a.configs:
        want = a.configs.split(",")
        configs = [c for c in want if c in configs or c == "bare"]
    tmp = tempfile.mkdtemp()

    if a.model == "runner":
        runner = _runner()
        runner.LAYERS = a.layers
        HIDDEN, BATCH_SIZES = runner.HIDDEN, runner.BATCH_SIZES
        torch.manual_seed(0)
        model = runner.Model().cuda().eval()
        static_in = {bs: torch.zeros(bs, HIDDEN, device="cuda") for bs in BATCH_SIZES}
        steps = [lambda bs=bs: model(static_in[bs]) for bs in BATCH_SIZES]
    else:  # a real model's decode step, as a server captures it
        spec = importlib.util.spec_from_file_location("gpt2_decode", os.path.join(ROOT, "sample_workloads",
                                                                                 "gpt2_decode.py"))
        gpt2 = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(gpt2)  # type: ignore[union-attr]
        step = gpt2.setup()
        BATCH_SIZES = [1, 2, 3, 4]  # four captures of the same step a round (the label only)
        steps = [step] * 4
    with torch.no_grad():
        for fn in steps:
            fn()
    torch.cuda.synchronize()

    import gc

    gc_s = [0.0, 0.0, 0]  # seconds in cyclic GC while capturing, its start, collections

    def gc_clock(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_s[1] = time.perf_counter()
        else:
            gc_s[0] += time.perf_counter() - gc_s[1]
            gc_s[2] += 1

    # The compiled read (_graphread.read_graph) timed inside the graph-exec callback's read phase.
    from cgtool.capture import _fastcuda

    c_read = [0.0, 0]
    real_batch = _fastcuda._batch()

    class TimedBatch:
        def __getattr__(self, name: str) -> Any:
            return getattr(real_batch, name)

        def read_graph(self, *args: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return real_batch.read_graph(*args)
            finally:
                c_read[0] += time.perf_counter() - t0
                c_read[1] += 1

    if real_batch is not None:
        _fastcuda._BATCH = TimedBatch()

    def capture_all() -> list[float]:
        pool = torch.cuda.graph_pool_handle()
        graphs, outs, times = [], [], []
        with torch.no_grad():
            for fn in steps:
                g = torch.cuda.CUDAGraph()
                gc.callbacks.append(gc_clock)
                t0 = time.perf_counter()
                with torch.cuda.graph(g, pool=pool):
                    outs.append(fn())
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
                gc.callbacks.remove(gc_clock)
                graphs.append(g)
        for g in graphs:
            g.replay()
        torch.cuda.synchronize()
        del graphs, outs
        return times

    samples: dict[str, list[float]] = {c: [] for c in configs}
    subscribers: dict[str, str] = {}
    gc_us: dict[str, list[float]] = {}  # config -> [µs in cyclic GC while capturing, collections, µs in the C read, reads]
    cb_us: dict[str, dict[str, list[float]]] = {}  # config -> callback id -> [calls, µs inside], measured rounds
    phases_us: dict[str, dict[str, float]] = {}
    from cgtool.capture import graphread as export_mod  # where the recorder's reads are looked up
    from cgtool.capture.record.options import RecordOptions

    read_graph, read_quick = export_mod.read_graph, export_mod.read_quick
    for r in range(a.rounds + 1):  # round 0 warms every configuration up and is dropped
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        for cfg in order:
            sub = rec = None
            if cfg == "subscribed":
                sub = Sub(lib, cupti, cfuncs["py_noop"], enable=False)
            elif cfg == "c_noop":
                sub = Sub(lib, cupti, cnoop.cb, enable=True)  # type: ignore[union-attr]
            elif cfg in cfuncs:
                sub = Sub(lib, cupti, cfuncs[cfg], enable=True)
            elif cfg.startswith("recorder"):
                opts = RecordOptions(subscriber="ctypes" if cfg in ("recorder_py", "recorder_nodefer") else "auto",
                                     writer_quiet_s=0.0 if cfg == "recorder_nodefer" else 0.25,
                                     check_inputs=0 if cfg == "recorder_nochecks" else RecordOptions().check_inputs)
                history_fn = torch.cuda.memory._record_memory_history  # the input checks wrap it
                rec = Recorder(os.path.join(tmp, f"{cfg}{r}"), opts, program=["probe"])
                if cfg == "recorder_map":
                    export_mod.read_graph = lambda *x, **k: read_graph(*x, **{**k, "impl": "map"})  # type: ignore
                    export_mod.read_quick = lambda *x, **k: None  # type: ignore
                if cfg == "recorder_noreserved":
                    rec.tracker.reserved = lambda: None  # type: ignore[method-assign]
                if cfg == "recorder_torchstats":
                    rec.tracker.reserved = rec.tracker.reserved_by_torch  # type: ignore[method-assign]
                os.makedirs(rec.out_dir, exist_ok=True)
                rec.start()
                subscribers[cfg] = rec.subscriber
            gc_s[0], gc_s[2], c_read[0], c_read[1] = 0.0, 0, 0.0, 0
            times = capture_all()
            if r:
                acc = gc_us.setdefault(cfg, [0.0, 0, 0.0, 0])
                acc[0] += gc_s[0] * 1e6
                acc[1] += gc_s[2]
                acc[2] += c_read[0] * 1e6
                acc[3] += c_read[1]
            if sub is not None:
                sub.close()
            if rec is not None:
                rec.finish(0)
                # the input checks turned the allocator's history on for the process: off again, and
                # torch's function unwrapped, so that the next configuration captures as it would alone
                torch.cuda.memory._record_memory_history = history_fn
                history_fn(enabled=None)
                growth[cfg] = [g.reserved_during_capture for g in rec.graphs]
                export_mod.read_graph = read_graph
                export_mod.read_quick = read_quick
                if r:
                    per = cb_us.setdefault(cfg, {})
                    stats = dict(rec.tracker.cb_stats)
                    for key, v in rec.sub.compiled_stats()[0].items():  # the compiled callback's own
                        prev = stats.get(key, [0, 0])
                        stats[key] = [prev[0] + v[0], prev[1] + v[1]]
                    for (d, c), (calls, ns) in stats.items():
                        acc = per.setdefault(f"{d}/{c}", [0, 0.0])
                        acc[0] += calls
                        acc[1] += ns / 1e3
                    ph = phases_us.setdefault(cfg, {})
                    for k, v in rec.tracker.exec_totals().items():
                        ph[k] = ph.get(k, 0.0) + v * 1e6
            keep.clear()
            if r:
                samples[cfg].extend(times)
    shutil.rmtree(tmp, ignore_errors=True)
    bare = statistics.median(samples["bare"])
    # Paired: each graph's time against the bare capture of the same graph in the same round
    # (every round captures the same graphs under each configuration), then the median.
    paired = {c: statistics.median(x / b for x, b in zip(v, samples["bare"])) for c, v in samples.items()}
    summary = {
        "model": a.model, "layers": a.layers, "rounds": a.rounds, "graphs_per_round": len(BATCH_SIZES),
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "median_ms": {c: statistics.median(v) * 1e3 for c, v in samples.items()},
        "ratio_to_bare": {c: statistics.median(v) / bare for c, v in samples.items()},
        "paired_ratio_to_bare": paired,
        "node_us": inside[0] / max(inside[1], 1) / 1e3,
        "recorder_subscribers": subscribers,
        "python": sys.version.split()[0],
        "raw_ms": {c: [x * 1e3 for x in v] for c, v in samples.items()},
        # per graph captured: µs inside each recorder callback id (calls per graph beside it), and
        # the graph-exec callback's phases
        "callbacks_us_per_graph": {c: {k: {"calls": v[0] / len(samples[c]), "us": v[1] / len(samples[c])}
                                       for k, v in sorted(per.items())} for c, per in cb_us.items()},
        "exec_phases_us_per_graph": {c: {k: v / len(samples[c]) for k, v in ph.items()}
                                     for c, ph in phases_us.items()},
        "reserved_during_capture_last_round": growth,
        "gc_us_per_graph": {c: v[0] / len(samples[c]) for c, v in gc_us.items()},
        "gc_collections_per_graph": {c: v[1] / len(samples[c]) for c, v in gc_us.items()},
        "compiled_read_us_per_graph": {c: v[2] / len(samples[c]) for c, v in gc_us.items() if v[3]},
    }
    with open(a.out, "w") as f:
        json.dump(summary, f, indent=1)
    for c in configs:
        print(f"{c:>20}: {summary['median_ms'][c]:7.2f} ms  {summary['ratio_to_bare'][c]:5.2f}x the bare median, "
              f"{paired[c]:5.3f}x paired (median of each graph against its bare capture in the same round)")
    print(f"grab_node_info inside the node callback: {summary['node_us']:.2f} us per node")
    for c, per in summary["callbacks_us_per_graph"].items():
        total = sum(v["us"] for v in per.values())
        print(f"{c}: {total:.0f} us per graph inside callbacks: " +
              ", ".join(f"{k} {v['us']:.0f} us ({v['calls']:.0f}x)" for k, v in per.items()))
        print("   graph-exec phases:", ", ".join(f"{k} {v:.0f} us" for k, v in
                                             summary["exec_phases_us_per_graph"].get(c, {}).items()))
    print("recorder subscribers:", subscribers)
    print("memory taken per capture (last round):", growth)
    print("cyclic GC while capturing, per graph:", ", ".join(
        f"{c} {v:.0f} us ({summary['gc_collections_per_graph'][c]:.2f} collections)"
        for c, v in summary["gc_us_per_graph"].items()))
    print("the compiled read (_graphread.read_graph) per graph:", ", ".join(
        f"{c} {v:.0f} us" for c, v in summary["compiled_read_us_per_graph"].items()))


if __name__ == "__main__":
    main()
