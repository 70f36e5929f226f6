"""Two PyTorch tests of the graph API in ONE process, on cgtool's engine or on torch alone.

1. ``failed``: capture on a side stream, allocate 32 MiB, ``torch.cuda.synchronize()`` inside the
   capture (raises), ``capture_end()`` (raises), ``reset()``, ``empty_cache()``: is
   ``memory_reserved()`` what it was before?
2. ``nested``: the sequence of PyTorch's ``test_graph_mem_pool_arg_and_nested_use_mem_pool``:
   capture on a side stream with ``pool=`` a fresh ``torch.cuda.MemPool()``, allocate under
   ``torch.cuda.use_mem_pool(side_pool)`` inside the capture, ``del side_pool``, ``gc.collect()``,
   replay, check, ``reset()``, check the capture pool's ``use_count()``.

Run in that order in one process they ended the interpreter in ``Graph.reset`` (``Fatal Python
error: Aborted``) before the engine ended a failed capture's allocation to its pool.

    python3 scripts/gpu/engine_pair.py --backend cgtool|torch [--order failed,nested]

Prints one JSON line per test (``ok``, the error if any, reserved bytes, the segments left) and
exits 0 when every test passed, 1 when one failed with a Python error; a death is the caller's to see.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from typing import Any


def segments(torch: Any) -> list[dict[str, Any]]:
    """The allocator's segments: pool id, size, bytes allocated in it, stream."""
    return [{"pool": list(s["segment_pool_id"]), "MiB": round(s["total_size"] / 2**20, 2),
             "allocated": s["allocated_size"], "stream": s["stream"]} for s in torch.cuda.memory_snapshot()]


def settle(torch: Any) -> int:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return int(torch.cuda.memory_reserved())


def test_failed(torch: Any, api: dict[str, Any]) -> dict[str, Any]:
    before = settle(torch)
    g = api["CUDAGraph"]()
    s = torch.cuda.Stream()
    errors = []
    with torch.cuda.stream(s):
        g.capture_begin()
        t = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
        try:
            torch.cuda.synchronize()
        except Exception as e:
            errors.append(f"sync: {type(e).__name__}")
        try:
            g.capture_end()
        except Exception as e:
            errors.append(f"capture_end: {type(e).__name__}")
    del t
    g.reset()
    after = settle(torch)
    return {"test": "failed", "ok": after == before and len(errors) == 2, "errors": errors,
            "reserved_before": before, "reserved_after": after, "segments_after": segments(torch)}


def test_nested(torch: Any, api: dict[str, Any], engine: bool) -> dict[str, Any]:
    x = torch.arange(1 << 16, device="cuda", dtype=torch.float32)
    s = torch.cuda.Stream()
    pool, side_pool = torch.cuda.MemPool(), torch.cuda.MemPool()
    g = api["CUDAGraph"]()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        g.capture_begin(pool=pool if engine else pool.id)
        y = x + 1
        with torch.cuda.use_mem_pool(side_pool):
            z = y * 2
        w = z + 3
        g.capture_end()
    torch.cuda.current_stream().wait_stream(s)
    del side_pool, z
    gc.collect()
    x.add_(1)
    g.replay()
    torch.cuda.synchronize()
    ok = bool(torch.equal(w, (x + 1) * 2 + 3))
    del y, w
    g.reset()
    gc.collect()
    return {"test": "nested", "ok": ok and pool.use_count() == 1, "replay_ok": ok,
            "pool_use_count_after_reset": pool.use_count(), "errors": []}


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--backend", choices=("cgtool", "torch"), default="cgtool")
    ap.add_argument("--order", default="failed,nested")
    args = ap.parse_args()
    import torch

    if args.backend == "cgtool":
        from cgtool.capture import graph as eng

        api = {"CUDAGraph": eng.Graph}
    else:
        api = {"CUDAGraph": torch.cuda.CUDAGraph}
    torch.ones(1, device="cuda")
    bad = 0
    for name in args.order.split(","):
        try:
            rec = test_failed(torch, api) if name == "failed" else test_nested(torch, api, args.backend == "cgtool")
        except Exception as e:
            rec = {"test": name, "ok": False, "errors": [f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"]}
        rec["backend"] = args.backend
        bad += not rec["ok"]
        os.write(1, (json.dumps(rec) + "\n").encode())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
