"""Why does ``cgtool bench`` time a Hugging Face model's graph slower than a plain loop does?

    PYTHONPATH=. python3 benchmarks/probe_hf_capture.py [--workload hf_llama.py] [--args "--dtype bf16"]
                       [--rounds 3] [--blocks 10] [--per 100] [--arms plain,cgtool,...] [--budget S] [--out DIR]

GPU only. Every ARM runs in a fresh process (a child forked from a server that has imported torch
and the model's library, with no CUDA context; ``--exec`` starts each with ``python3`` instead),
the arms' order rotated each round. Each arm captures the step of ``sample_workloads/<workload>``
one way, then times blocks of back-to-back replays between CUDA events after 50 untimed ones (as
``benchmarks/bench_vs_plain.py``). Arms, each ONE difference from ``plain`` or from ``cgtool``:

* ``plain``: ``bench_vs_plain.plain``: warm-up 3 times on a side stream, ``torch.cuda.graph(g)``
  (its own capture stream), replays on the current stream.
* ``cgtool``: the function ``cgtool bench``'s child runs (``bench_workload``), first capture
  (captured on a stream of its own, as ``torch.cuda.graph``).
* ``plain_samestream``: capture on the warm-up's side stream (``torch.cuda.graph(g, stream=s)``).
* ``plain_engine``: cgtool's engine (``Graph`` + ``graph()``) on a new stream.
* ``plain_keep``: torch's ``CUDAGraph(keep_graph=True)``, instantiated after capture.
* ``plain_pool``: a pool from ``graph_pool_handle()`` passed to ``torch.cuda.graph``.
* ``plain_nogc``: ``torch.cuda.graph``'s steps without its ``gc.collect()``.
* ``plain_syncwarn``: the warm-up under ``torch.cuda.set_sync_debug_mode("warn")``.
* ``cgtool_warmupstream``: cgtool capturing on the warm-up's side stream (what it did before it
  captured on a stream of its own: the graph then reuses the warm-up's cuBLAS workspace).
* ``cgtool_gc``: cgtool with a ``gc.collect()`` before the capture.
* ``cgtool_nowarn``: cgtool without the sync debug mode around the warm-up.
* ``plain_ptrs``, ``cgtool_ptrs``: the first two with a ``TorchDispatchMode`` logging every
  tensor's address during the capture (round 1 only).

Recorded per process (a JSON file each, under ``--out``): the replay time; in ``plain`` and
``cgtool`` also the same graph timed in blocks of 1000 and of 10 replays (the timing loop); in the
profiled arms the kernels of 3 replays under ``torch.profiler`` (name, grid, block, duration, gap
to the previous kernel); the graph pool's blocks and the other pools' sizes after capture; the
math flags (TF32, reduced-precision reductions, SDPA backends, preferred BLAS); in the ``_ptrs``
arms every address. The summary compares each arm with ``plain`` of the same round.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from itertools import pairwise
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

ARMS = ["plain", "cgtool", "plain_samestream", "cgtool_warmupstream", "cgtool_gc", "plain_engine", "plain_keep",
        "plain_pool", "plain_nogc", "plain_syncwarn", "cgtool_nowarn"]
#: Run unless --arms names others: plain_engine stands for plain_keep and plain_pool (the engine's
#: differences together), plain_syncwarn for cgtool_nowarn.
DEFAULT_ARMS = ["plain", "cgtool", "plain_samestream", "cgtool_warmupstream", "cgtool_gc", "plain_engine",
                "plain_nogc", "plain_syncwarn"]
PROFILED = {"plain", "cgtool", "plain_samestream", "cgtool_warmupstream", "cgtool_gc"}
PTR_ARMS = ["plain_ptrs", "cgtool_ptrs"]
WARMUP = 50


# ------------------------------------------------------------------------------------ in a child

def _time(replay: Callable[[], Any], blocks: int, per: int) -> list[float]:
    import torch

    for _ in range(WARMUP):
        replay()
    torch.cuda.synchronize()
    evs = [torch.cuda.Event(enable_timing=True) for _ in range(blocks + 1)]
    evs[0].record()
    for k in range(blocks):
        for _ in range(per):
            replay()
        evs[k + 1].record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) * 1000 / per for a, b in pairwise(evs)]


def _flags() -> dict[str, Any]:
    import torch

    b = torch.backends
    out: dict[str, Any] = {"float32_matmul_precision": torch.get_float32_matmul_precision()}
    for name in ("allow_tf32", "allow_bf16_reduced_precision_reduction", "allow_fp16_reduced_precision_reduction"):
        out[f"matmul.{name}"] = repr(getattr(b.cuda.matmul, name, None))
    out["cudnn"] = [b.cudnn.enabled, b.cudnn.benchmark, b.cudnn.deterministic, b.cudnn.allow_tf32]
    for name in ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled", "cudnn_sdp_enabled"):
        fn = getattr(b.cuda, name, None)
        out[name] = fn() if fn else None
    out["preferred_blas"] = repr(getattr(b.cuda, "preferred_blas_library", lambda: None)())
    out["deterministic"] = torch.are_deterministic_algorithms_enabled()
    out["sync_debug_mode"] = torch.cuda.get_sync_debug_mode()
    return out


def _pools() -> dict[str, Any]:
    """Per pool: segments (address, size) and the sizes of its allocated blocks."""
    import torch

    pools: dict[str, Any] = {}
    for seg in torch.cuda.memory_snapshot():
        key = str(tuple(seg.get("segment_pool_id", (0, 0))))
        p = pools.setdefault(key, {"segments": [], "blocks": []})
        p["segments"].append([int(seg["address"]), int(seg["total_size"]), seg.get("stream"),
                              seg.get("segment_type")])
        off = int(seg["address"])
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                p["blocks"].append([off, int(b["size"])])
            off += int(b["size"])
    return pools


def _kernels(replay: Callable[[], Any], tmp: str) -> list[dict[str, Any]]:
    """The kernels of 3 replays under torch.profiler: name, grid, block, dur, ts (µs)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            replay()
        torch.cuda.synchronize()
    prof.export_chrome_trace(tmp)
    with open(tmp) as f:
        doc = json.load(f)
    os.unlink(tmp)
    ks = [e for e in doc.get("traceEvents", []) if e.get("cat") == "kernel"]
    ks.sort(key=lambda e: float(e["ts"]))
    return [{"name": e["name"], "grid": e.get("args", {}).get("grid"), "block": e.get("args", {}).get("block"),
             "regs": e.get("args", {}).get("registers per thread"),
             "smem": e.get("args", {}).get("shared memory"), "dur": float(e["dur"]), "ts": float(e["ts"])}
            for e in ks]


class _PtrLog:
    """A TorchDispatchMode that logs every tensor's address and size per op."""

    def __init__(self) -> None:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        log: list[Any] = []
        self.log = log

        class Mode(TorchDispatchMode):  # type: ignore[misc]
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                out = func(*args, **(kwargs or {}))
                ts: list[list[int]] = []

                def add(x: Any) -> None:
                    if isinstance(x, torch.Tensor) and x.is_cuda:
                        ts.append([int(x.data_ptr()), int(x.numel() * x.element_size())])
                    elif isinstance(x, (list, tuple)):
                        for y in x:
                            add(y)

                add(list(args))
                add(list((kwargs or {}).values()))
                add(out)
                log.append([str(func), ts])
                return out

        self.mode = Mode()


def _extras(res: dict[str, Any], replay: Callable[[], Any], arm: str, profile_it: bool, out_dir: str) -> None:
    import torch

    torch.cuda.synchronize()
    res["pools"] = _pools()
    res["flags_after"] = _flags()
    res["reserved"] = torch.cuda.memory_reserved()
    if arm in ("plain", "cgtool"):
        res["per1000_us"] = _time(replay, 2, 1000)
        res["per10_us"] = _time(replay, 10, 10)
    if profile_it:
        res["kernels"] = _kernels(replay, os.path.join(out_dir, f".prof-{os.getpid()}.json"))


def run_arm(arm: str, workload: str, args: list[str], blocks: int, per: int, out_dir: str, path: str,
            profile_it: bool) -> None:
    """One arm in this (fresh) process; writes its JSON to ``path``."""
    t0 = time.time()
    res: dict[str, Any] = {"arm": arm, "pid": os.getpid()}
    try:
        _run_arm(res, arm, workload, args, blocks, per, out_dir, profile_it)
    except BaseException as e:  # noqa: BLE001 -- reported in the file: the parent goes on
        import traceback

        res["error"] = f"{type(e).__name__}: {e}"[:500]
        res["traceback"] = traceback.format_exc()[-3000:]
    res["wall_s"] = time.time() - t0
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f)
    os.replace(tmp, path)


def _run_arm(res: dict[str, Any], arm: str, workload: str, args: list[str], blocks: int, per: int, out_dir: str,
             profile_it: bool) -> None:
    import torch

    from cgtool.capture.entrypoint import call_setup, parse_target, resolve

    target = os.path.join(ROOT, "sample_workloads", workload)
    res["flags_before"] = _flags()
    base = arm.removesuffix("_ptrs")
    ptrs = _PtrLog() if arm.endswith("_ptrs") else None
    if base.startswith("cgtool"):
        from cgtool.artifacts.bench import BenchSpec
        from cgtool.capture import bench, runner

        real_capture_step, real_check, real_warm_up = runner.capture_step, runner.check_replay, runner.warm_up
        warm_streams: list[Any] = []

        def warm_up(t: Any, step: Any, stream: Any, *a: Any) -> None:
            warm_streams.append(stream)
            real_warm_up(t, step, stream, *a)

        def capture_step(t: Any, step: Any, stream: Any, **kw: Any) -> Any:
            if base == "cgtool_gc":
                gc.collect()
            if base == "cgtool_warmupstream":
                stream = warm_streams[-1]
            res["capture_stream_is_warmup_stream"] = stream is warm_streams[-1]
            if ptrs is not None:
                inner = step

                def step() -> Any:
                    with ptrs.mode:
                        return inner()
            return real_capture_step(t, step, stream, **kw)

        def check(cap: Any, *a: Any, **kw: Any) -> None:
            _extras(res, bench.torch_replay(cap), base, profile_it, out_dir)
            real_check(cap, *a, **kw)

        runner.capture_step = capture_step
        runner.check_replay = check
        runner.warm_up = warm_up
        if base == "cgtool_nowarn":
            runner.watch_syncs = lambda torch, sites: contextlib.nullcontext()
        spec = BenchSpec(replays=blocks * per, blocks=blocks, warmup=WARMUP, recaptures=1, eager=False)
        w = bench.bench_workload(target, args, spec)
        res["samples_us"] = list(w.gpu_us)
        res["check_ok"] = w.check_ok
    else:
        t = parse_target(target)
        step = call_setup(t, resolve(t, args), args)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        warm = contextlib.nullcontext()
        if base == "plain_syncwarn":
            from cgtool.capture.runner import watch_syncs

            warm = watch_syncs(torch, [])  # type: ignore[assignment]
        with warm, torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        body = step
        if ptrs is not None:
            def body() -> Any:
                with ptrs.mode:
                    return step()
        if base == "plain_engine":
            from cgtool.capture.graph import Graph, graph

            eg = Graph(keep_graph=True)
            with graph(eg, stream=torch.cuda.Stream()):
                out = body()
            eg.instantiate()
            replay = eg._g.replay
        elif base == "plain_nogc":
            g = torch.cuda.CUDAGraph()
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            with torch.cuda.stream(torch.cuda.Stream()):
                g.capture_begin()
                out = body()
                g.capture_end()
            replay = g.replay
        else:
            g = torch.cuda.CUDAGraph(keep_graph=base == "plain_keep")
            kw: dict[str, Any] = {}
            if base == "plain_samestream":
                kw["stream"] = s
            if base == "plain_pool":
                kw["pool"] = torch.cuda.graph_pool_handle()
            with torch.cuda.graph(g, **kw):
                out = body()
            if base == "plain_keep":
                g.instantiate()
            replay = g.replay
        res["samples_us"] = _time(replay, blocks, per)
        _extras(res, replay, base, profile_it, out_dir)
        del out
    res["median_us"] = statistics.median(res["samples_us"])
    if ptrs is not None:
        res["ptrs"] = ptrs.log
    res["device"] = torch.cuda.get_device_name()


# ------------------------------------------------------------------------------------ the parent

def _server_preload(workload: str) -> list[str]:
    mods = ["torch", "numpy", "cgtool.capture.bench", "cgtool.capture.runner"]
    if "hf_" in workload:
        mods += ["transformers"]
    if "timm" in workload:
        mods += ["timm"]
    return mods


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="hf_llama.py")
    p.add_argument("--args", default="--dtype bf16")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--blocks", type=int, default=10)
    p.add_argument("--per", type=int, default=100)
    p.add_argument("--arms", default=",".join(DEFAULT_ARMS), help=f"of: {', '.join(ARMS + PTR_ARMS)}")
    p.add_argument("--no-ptr-arms", dest="ptr_arms", action="store_false",
                   help="leave out plain_ptrs and cgtool_ptrs (round 1)")
    p.add_argument("--no-profile", dest="profile", action="store_false",
                   help="no torch.profiler run of 3 replays in the profiled arms")
    p.add_argument("--budget", type=float, default=0.0, help="seconds: start no arm that would end later")
    p.add_argument("--exec", action="store_true", help="start each arm with python3 (not forked from a server)")
    p.add_argument("--out", default="probe_hf_out")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    args = shlex.split(a.args)
    if a.child:
        arm, path = a.child
        run_arm(arm, a.workload, args, a.blocks, a.per, a.out, path, a.profile and arm in PROFILED)
        return
    os.makedirs(a.out, exist_ok=True)
    arms = [x for x in a.arms.split(",") if x]
    pool = None
    if not a.exec:
        import multiprocessing as mp

        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(_server_preload(a.workload))
        pool = ctx
    t0, took = time.time(), 10.0
    plan = []
    for r in range(a.rounds):
        k = r % len(arms)
        order = arms[k:] + arms[:k]
        if r == 0 and a.ptr_arms:
            order = order + PTR_ARMS
        plan += [(r, arm) for arm in order]
    print(f"{a.workload} {a.args}: {len(plan)} processes ({'python3 each' if a.exec else 'forked from a server'}); "
          f"{a.blocks} blocks of {a.per} replays", flush=True)
    results: list[dict[str, Any]] = []
    for r, arm in plan:
        if a.budget and time.time() - t0 + took > a.budget:
            print(f"  budget reached: not run: round {r + 1} {arm}", flush=True)
            continue
        path = os.path.abspath(os.path.join(a.out, f"r{r + 1}_{arm}.json"))
        ts = time.time()
        if pool is None:
            subprocess.run([sys.executable, __file__, "--workload", a.workload, f"--args={a.args}", "--blocks",
                            str(a.blocks), "--per", str(a.per), "--out", a.out, "--child", arm, path]
                           + ([] if a.profile else ["--no-profile"]),
                           check=False, env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
        else:
            proc = pool.Process(target=run_arm, args=(arm, a.workload, args, a.blocks, a.per, a.out, path,
                                                      a.profile and arm in PROFILED))
            proc.start()
            proc.join()
        took = max(took * 0.5, time.time() - ts)
        try:
            with open(path) as f:
                res = json.load(f)
        except (OSError, ValueError):
            res = {"arm": arm, "error": "no result file"}
        res["round"] = r + 1
        results.append(res)
        if res.get("error"):
            print(f"  round {r + 1} {arm:18s} ERROR {res['error']}\n{res.get('traceback', '')[-1500:]}", flush=True)
        else:
            print(f"  round {r + 1} {arm:18s} {res['median_us']:9.2f} µs  ({time.time() - ts:.1f} s)", flush=True)
    summarize(results)


def _kernel_summary(ks: list[dict[str, Any]]) -> dict[str, Any]:
    if not ks:
        return {}
    n = len(ks) // 3
    first = ks[n:2 * n]  # the middle replay
    gaps = [b["ts"] - (a["ts"] + a["dur"]) for a, b in pairwise(first)]
    return {"n": n, "sum_dur": sum(k["dur"] for k in first), "sum_gap": sum(gaps),
            "sig": [(k["name"], str(k["grid"]), str(k["block"])) for k in first],
            "durs": [k["dur"] for k in first]}


def summarize(results: list[dict[str, Any]]) -> None:
    ok = [r for r in results if not r.get("error")]
    plain = {r["round"]: r["median_us"] for r in ok if r["arm"] == "plain"}
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for r in ok:
        by_arm.setdefault(r["arm"], []).append(r)
    print(f"\n{'arm':18s} {'µs per replay (rounds)':>30s} {'vs plain':>9s}  blocks of 1000 / 10")
    for arm, rs in by_arm.items():
        ratios = [r["median_us"] / plain[r["round"]] for r in rs if r["round"] in plain]
        extra = ""
        if "per1000_us" in rs[0]:
            extra = "  " + "; ".join(f"{statistics.median(r['per1000_us']):.1f} / {statistics.median(r['per10_us']):.1f}"
                                      for r in rs)
        meds = " ".join(f"{r['median_us']:.1f}" for r in rs)
        print(f"{arm:18s} {meds:>30s} "
              f"{statistics.median(ratios) if ratios else float('nan'):9.4f}{extra}")
    # Kernels: each profiled arm against plain of the same round.
    ref = {r["round"]: _kernel_summary(r.get("kernels") or []) for r in ok if r["arm"] == "plain"}
    print(f"\n{'arm':18s} round kernels  sum dur µs  sum gap µs  kernels differing from plain (name/grid/block)")
    for r in ok:
        ks = _kernel_summary(r.get("kernels") or [])
        if not ks:
            continue
        p = ref.get(r["round"]) or {}
        diff = [i for i, (x, y) in enumerate(zip(ks["sig"], p.get("sig", []))) if x != y]
        slower = ""
        if p and len(p.get("durs", [])) == ks["n"]:
            d = sorted(((b - a, i) for i, (a, b) in enumerate(zip(p["durs"], ks["durs"]))), reverse=True)[:3]
            slower = "; slowest vs plain: " + ", ".join(f"#{i} {ks['sig'][i][0][:40]} +{x:.2f}" for x, i in d)
        print(f"{r['arm']:18s} {r['round']:5d} {ks['n']:7d} {ks['sum_dur']:11.1f} {ks['sum_gap']:11.1f}  "
              f"{len(diff)}{' (count differs)' if p and p.get('n') != ks['n'] else ''}{slower}")
        for i in diff[:5]:
            print(f"      #{i}: {ks['sig'][i]}  plain: {p['sig'][i]}")
    # Pools: the graph pool's largest blocks.
    print("\nper arm (round 1): pools after capture: (pool id) segments, MiB, largest allocated blocks")
    for r in ok:
        if r["round"] != 1:
            continue
        desc = []
        for pid, pl in (r.get("pools") or {}).items():
            mib = sum(s[1] for s in pl["segments"]) / 2**20
            big = sorted((b[1] for b in pl["blocks"]), reverse=True)[:3]
            desc.append(f"{pid}: {len(pl['segments'])} seg {mib:.0f} MiB, {[x // 1024 for x in big]} KiB")
        print(f"  {r['arm']:18s} " + " | ".join(desc))
    flags = {json.dumps(r.get("flags_before"), sort_keys=True) for r in ok}
    print(f"\nmath flags: {len(flags)} distinct setting(s) over the arms: {sorted(flags)[:2]}")
    # Pointers: the two _ptrs arms.
    pp = {r["arm"]: r for r in ok if r["arm"].endswith("_ptrs")}
    if "plain_ptrs" in pp and "cgtool_ptrs" in pp:
        a, b = pp["plain_ptrs"]["ptrs"], pp["cgtool_ptrs"]["ptrs"]
        print(f"\naddresses during capture: {len(a)} ops (plain) vs {len(b)} (cgtool); "
              f"times {pp['plain_ptrs']['median_us']:.1f} vs {pp['cgtool_ptrs']['median_us']:.1f} µs")
        for mod in (16, 128, 256, 1024, 4096, 65536, 2 << 20):
            n = same = 0
            for (fa, ta), (fb, tb) in zip(a, b):
                for (pa, _), (pb, _) in zip(ta, tb):
                    n += 1
                    same += (pa % mod) == (pb % mod)
            print(f"  address mod {mod:8d}: {same}/{n} the same")
        names = sum(fa != fb for (fa, _), (fb, _) in zip(a, b))
        print(f"  ops differing by name: {names}")


if __name__ == "__main__":
    main()
