"""What torch's caching-allocator history costs, and what it offers (the input checks of ``cgtool
record`` are built on it): per allocation+free with the history off and on, and ``_snapshot()``'s time
as its ring fills. One process; prints one JSON document.

    python benchmarks/probe_allocator_history.py [--out FILE]
"""
import argparse
import json
import time

import torch


def alloc_free_ns(n: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        x = torch.empty(1024, device="cuda")
        del x
    return (time.perf_counter_ns() - t0) / n


def snapshot_ms(reps: int = 5) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.cuda.memory._snapshot()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    a = ap.parse_args()
    torch.cuda.init()
    keep = [torch.empty(4096, device="cuda") for _ in range(300)]  # a few hundred live blocks
    out: dict = {"torch": torch.__version__, "device": torch.cuda.get_device_name()}
    C = torch._C
    out["has"] = {k: hasattr(C, k) for k in ("_cuda_getBlockMempoolId", "_cuda_record_memory_history",
                                             "_cuda_memorySnapshot", "_cuda_attach_out_of_memory_observer")}
    out["has"]["StorageWeakRef"] = hasattr(torch.multiprocessing.reductions, "StorageWeakRef")
    import ctypes
    lib = ctypes.CDLL("libcuda.so.1")
    out["has"]["cuFuncGetParamInfo"] = hasattr(lib, "cuFuncGetParamInfo")
    alloc_free_ns(2000)
    out["alloc_free_ns_off"] = alloc_free_ns(20000)
    out["snapshot_ms_off"] = snapshot_ms()
    for stacks in ("python",):
        for entries in (2000, 20000, 100000):
            torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks=stacks, max_entries=entries)
            alloc_free_ns(2000)
            ns = alloc_free_ns(20000)
            ms = snapshot_ms()
            out[f"{stacks}_{entries}"] = {"alloc_free_ns": ns, "snapshot_ms_full_ring": ms}
            torch.cuda.memory._record_memory_history(enabled=None)
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=20000)
    t_before = time.time() * 1e6
    y = torch.empty(77, device="cuda")
    t_after = time.time() * 1e6
    del y
    s = torch.cuda.memory._snapshot()
    ev = [e for e in s["device_traces"][0] if e.get("size") == 512 or e.get("action") in ("free_requested",)][-3:]
    out["clock"] = {"before": t_before, "after": t_after, "events": [{k: e.get(k) for k in ("action", "addr", "size", "time_us")} for e in ev]}
    out["event_keys"] = sorted(s["device_traces"][0][-1].keys())
    out["frames_sample"] = s["device_traces"][0][-1].get("frames", [])[:4]
    seg = s["segments"][0]
    out["segment_keys"] = sorted(seg.keys())
    out["block_keys"] = sorted(seg["blocks"][0].keys())
    g = torch.cuda.CUDAGraph()
    x = torch.ones(8, device="cuda")
    with torch.cuda.graph(g):
        y = x * 2
    out["raw_exec"] = type(g.raw_cuda_graph_exec()).__name__
    out["graph_has_dict"] = hasattr(g, "__dict__")
    del keep
    text = json.dumps(out, indent=1, default=str)
    print(text)
    if a.out:
        open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
