"""tests/programs/server_runner.py's captures with each part of ``with torch.cuda.graph`` timed.

    python benchmarks/capture_phases_program.py LAYERS [SERVE_S]

A program for ``benchmarks/bench_record.py --program phases`` (it does not import cgtool): the
runner's model, warm-up, four captures in one pool and serving, as the runner does them, with each
capture split into

* ``enter``: ``torch.cuda.graph.__enter__`` (synchronize, ``gc.collect()``, ``empty_cache``,
  ``capture_begin``), of which ``gc``: the time inside cyclic garbage collections (``gc.callbacks``);
* ``body``: the model's forward under capture (every node is created here);
* ``exit``: ``__exit__`` (``capture_end``: end of capture, instantiation, and under ``cgtool record``
  its graph-exec callback);
* ``sync``: the synchronize after it (the runner times it too).

``capture_s`` is their sum, the figure the runner prints. It also prints the number of objects the
cyclic collector tracks before the first capture (a full collection walks them all).
"""
from __future__ import annotations

import gc
import importlib.util
import json
import os
import sys
import time

import torch

RUNNER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "programs",
                      "server_runner.py")


def _runner(layers: int):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("server_runner", RUNNER)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    argv, sys.argv = sys.argv, [RUNNER, str(layers)]  # it reads its layer count from argv at import
    try:
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
    finally:
        sys.argv = argv
    return mod


def main() -> None:
    t_start = time.perf_counter()
    layers = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    serve_s = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    run = _runner(layers)
    in_gc, gc_start = [0.0], [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_start[0] = time.perf_counter()
        else:
            in_gc[0] += time.perf_counter() - gc_start[0]

    torch.manual_seed(0)
    model = run.Model().cuda().eval()
    sizes = run.BATCH_SIZES
    static_in = {bs: torch.zeros(bs, run.HIDDEN, device="cuda") for bs in sizes}
    graphs: dict[int, torch.cuda.CUDAGraph] = {}
    static_out: dict[int, torch.Tensor] = {}
    pool = torch.cuda.graph_pool_handle()
    capture_s, phases = [], []
    with torch.no_grad():
        for bs in sizes:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                model(static_in[bs])
            torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        tracked = len(gc.get_objects())
        gc.callbacks.append(on_gc)
        for bs in sizes:
            g = torch.cuda.CUDAGraph()
            in_gc[0] = 0.0
            t0 = time.perf_counter()
            with torch.cuda.graph(g, pool=pool):
                t1 = time.perf_counter()
                gc_enter = in_gc[0]
                static_out[bs] = model(static_in[bs])
                t2 = time.perf_counter()
            t3 = time.perf_counter()
            torch.cuda.synchronize()
            t4 = time.perf_counter()
            capture_s.append(t4 - t0)
            phases.append({"enter": t1 - t0, "gc": gc_enter, "body": t2 - t1, "exit": t3 - t2, "sync": t4 - t3,
                           "gc_other": in_gc[0] - gc_enter})
            graphs[bs] = g
        gc.callbacks.remove(on_gc)
        replays = {bs: 0 for bs in sizes}
        t_serve = time.perf_counter()
        while True:
            for n in run.REQUESTS:
                bs = min(b for b in sizes if b >= n)
                static_in[bs][:n].normal_()
                graphs[bs].replay()
                replays[bs] += 1
            torch.cuda.synchronize()
            if time.perf_counter() - t_serve >= serve_s:
                break
    print("RESULT " + json.dumps({"batch_sizes": sizes, "replays": replays, "capture_s": capture_s,
                                  "phases": phases, "gc_tracked": tracked,
                                  "wall_s": time.perf_counter() - t_start}))


if __name__ == "__main__":
    main()
