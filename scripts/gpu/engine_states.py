"""Random call sequences over the CUDA-graph API, in long-lived worker processes, on two backends.

Each sequence is a list of calls on two graph slots, a few ``torch.cuda.MemPool`` slots and the
tensors they make: ``capture_begin``/``capture_end`` with and without ``pool=`` (a pool handle, a
MemPool, another graph's ``pool()``), every ``capture_error_mode``, ``keep_graph``; a failing op
inside a capture (host sync, ``.item()``, a raw ``cudaMalloc``, a forked stream never joined, an op
on the legacy default stream); ``torch.cuda.use_mem_pool`` (nested); ``replay``, ``reset``,
``instantiate``, ``capture_end_pre``/``post``, ``debug_dump``, ``get_graph_data``, ``pool``/``pools``,
hooks; ``del`` + ``gc.collect()``; the ``graph`` context manager; ``make_graphed_callables``.

The same sequences run against cgtool's engine (``--backends cgtool``) and torch's own
``torch.cuda.CUDAGraph``/``torch.cuda.graph`` (``torch``). A worker runs many sequences in one
process; after each it checks that (1) the process is alive, (2) a fresh capture + replay equals
eager, (3) ``torch.cuda.memory_reserved()`` after ``reset`` + ``empty_cache`` equals its value
before the sequence. A worker that dies (signal, abort) or hangs (``--timeout``) is recorded and
replaced; the sequences it ran are then shrunk, by deletion, to the shortest program that still
kills a fresh process (each attempt in a child forked from a process that imported torch but has
not touched CUDA, so an attempt costs a CUDA context, not an import).

    python3 scripts/gpu/engine_states.py --sequences 2000 --workers cgtool=5,torch=9 --json OUT.json
    python3 scripts/gpu/engine_states.py --backends fake ...   # no GPU: the fake backend (tests)

Prints one table (sequences, deaths, hangs, broken processes, leaks, Python errors per backend) and
writes every sequence's result to ``--json``. Exit status 0 when cgtool (else the first backend) had
no death, hang, broken process or leak and ran every sequence, 1 otherwise. The generator, the shrinker and the table are plain Python; the fake
backend (``FakeBackend``) lets tests run the whole machinery without torch.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import wait as mp_wait
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
SLOTS = 2  # graph slots, each with its own capture stream
POOLS = 3  # MemPool slots
MODES = ("global", "thread_local", "relaxed")
FAILS = ("sync", "item", "malloc", "unjoined", "default_stream")
POOL_ARGS = ("none", "handle", "mempool", "shared")
#: Calls the engine adds to torch 2.11's CUDAGraph: on torch they raise AttributeError ("missing API").
ENGINE_ONLY = ("end_pre", "end_post", "hooks", "get_graph_data")

Op = dict[str, Any]
Program = list[list[Op]]  # sequences run one after another in one process, checked after each


# --------------------------------------------------------------------------------------- generation
def _op(rng: random.Random) -> Op:
    """One random call. Weights favour captures, failures inside them and the calls after them."""
    s = rng.randrange(SLOTS)
    kind = rng.choices(
        ["new", "begin", "work", "rng", "alloc", "fail", "use_pool", "end", "end_pre", "end_post", "ctx",
         "replay", "reset", "instantiate", "debug_dump", "get_graph_data", "pool", "pools", "raw",
         "hooks", "mempool", "del_pool", "del_graph", "mgc", "gc"],
        weights=[4, 10, 8, 2, 4, 6, 6, 9, 2, 2, 5,
                 6, 8, 2, 1, 1, 2, 2, 1,
                 1, 4, 3, 3, 1, 2],
    )[0]
    op: Op = {"op": kind}
    if kind not in ("mempool", "del_pool", "mgc", "gc"):
        op["slot"] = s
    if kind == "new":
        op["keep_graph"] = rng.random() < 0.4
    elif kind in ("begin", "ctx"):
        op["pool"] = rng.choice(POOL_ARGS)
        op["mode"] = rng.choice(MODES)
        if op["pool"] == "mempool":
            op["p"] = rng.randrange(POOLS)
        if kind == "ctx":
            op["body"] = rng.choice(["ok", "ok", "use_pool"] + list(FAILS))
            op["p2"] = rng.randrange(POOLS)
    elif kind == "alloc":
        op["mb"] = rng.choice([1, 32])
        op["keep"] = rng.random() < 0.5
    elif kind == "fail":
        op["kind"] = rng.choice(FAILS)
    elif kind == "use_pool":
        op["p"] = rng.randrange(POOLS)
        # a different pool: torch 2.11's use_mem_pool of the pool already current counts a use it
        # never gives back, with or without a graph (outside the graph API)
        op["nested"] = rng.choice([q for q in range(POOLS) if q != op["p"]]) if rng.random() < 0.4 else None
    elif kind in ("mempool", "del_pool"):
        op["p"] = rng.randrange(POOLS)
    elif kind == "hooks":
        op["raise"] = rng.random() < 0.3
    return op


def generate(seed: int, n_ops: tuple[int, int] = (3, 16)) -> list[Op]:
    """The sequence of ``seed``: the same calls for every backend and on every machine."""
    rng = random.Random(seed)
    return [_op(rng) for _ in range(rng.randint(*n_ops))]


# --------------------------------------------------------------------------------------- shrinking
def shrink(program: Program, kills: Callable[[Program], bool], budget: int = 80) -> tuple[Program, int]:
    """The shortest program found by deletion that still ``kills``; and the attempts made.

    First whole sequences are dropped (the last one, that died, is kept in place), then single
    calls, repeatedly until a pass removes nothing or ``budget`` attempts are spent. ``program`` is
    assumed to kill; the result always does (it is ``program`` when nothing could be removed).
    """
    attempts = 0

    def tryit(candidate: Program) -> bool:
        nonlocal attempts
        if attempts >= budget or not any(candidate):
            return False
        attempts += 1
        return kills(candidate)

    best = [list(seq) for seq in program]
    if len(best) > 1 and tryit([best[-1]]):
        best = [best[-1]]
    i = 0
    while i < len(best) - 1 and attempts < budget:
        cand = best[:i] + best[i + 1 :]
        if tryit(cand):
            best = cand
        else:
            i += 1
    changed = True
    while changed and attempts < budget:
        changed = False
        for si in range(len(best)):
            oi = 0
            while oi < len(best[si]) and attempts < budget:
                cand = [list(q) for q in best]
                del cand[si][oi]
                cand = [q for q in cand if q]
                if cand and tryit(cand):
                    best, changed = cand, True
                    if si >= len(best):
                        break
                else:
                    oi += 1
            if si >= len(best):
                break
    return best, attempts


# --------------------------------------------------------------------------------------- results
@dataclass
class Tally:
    """Counts of one backend's run; each count comes from the per-sequence results."""

    sequences: int = 0
    deaths: int = 0
    hangs: int = 0
    broken: int = 0  # alive, but a fresh capture + replay no longer works (worker replaced)
    leaks: int = 0
    leaked_bytes: int = 0
    python_errors: int = 0  # calls that raised an exception, missing APIs excluded
    missing_api: int = 0  # calls torch's CUDAGraph lacks (AttributeError on an engine-only call)
    error_types: dict[str, int] = field(default_factory=dict)


def tally(results: list[dict[str, Any]]) -> Tally:
    """Counts from the result records of one backend (see ``Worker`` for a record's keys)."""
    t = Tally()
    for r in results:
        t.sequences += 1
        t.deaths += r["status"] == "died"
        t.hangs += r["status"] == "hung"
        t.broken += r["status"] == "broken"
        leak = r.get("leaked_bytes") or 0
        t.leaks += leak > 0
        t.leaked_bytes += max(leak, 0)
        for e in r.get("errors", []):
            if e.get("missing_api"):
                t.missing_api += 1
            else:
                t.python_errors += 1
                t.error_types[e["type"]] = t.error_types.get(e["type"], 0) + 1
    return t


def render_table(tallies: dict[str, Tally]) -> str:
    """The comparison table, one column per backend."""
    rows = [
        ("sequences", "sequences"), ("process deaths", "deaths"), ("hangs", "hangs"),
        ("broken (fresh capture fails)", "broken"), ("sequences leaking reserved bytes", "leaks"),
        ("reserved bytes leaked (sum)", "leaked_bytes"), ("Python errors raised", "python_errors"),
        ("calls missing from the API", "missing_api"),
    ]
    names = list(tallies)
    w = max(len(r[0]) for r in rows)
    cols = [max(12, len(n)) for n in names]
    out = [f"{'':<{w}} | " + " | ".join(f"{n:>{c}}" for n, c in zip(names, cols))]
    out.append("-" * w + "-|-" + "-|-".join("-" * c for c in cols))
    for label, key in rows:
        out.append(f"{label:<{w}} | " + " | ".join(f"{getattr(tallies[n], key):>{c}}" for n, c in zip(names, cols)))
    return "\n".join(out)


# --------------------------------------------------------------------------------------- backends
class Interrupted(Exception):
    """Raised by a backend when the process can no longer run sequences (the worker is replaced)."""


class FakeBackend:
    """A pure-Python stand-in for the GPU backends, with bugs that tests switch on.

    It keeps each slot's state as the engine does (new / capturing / captured / failed) and raises
    Python errors for calls out of order. ``bugs`` (comma list, env ``ENGINE_STATES_FAKE_BUGS``):
    ``abort``: ``reset`` of a slot whose capture failed, after a ``use_pool`` in that process,
    aborts the process; ``hang``: ``replay`` of a slot captured with a MemPool sleeps forever;
    ``leak``: a failed capture keeps 2 MiB reserved for ever; ``cache``: the check after a sequence
    leaves 2 MiB reserved but free (given back by ``settle()``, as ``empty_cache`` does).
    """

    name = "fake"

    def __init__(self, bugs: str = "") -> None:
        self.bugs = set(b for b in bugs.split(",") if b)
        self.reserved = 0
        self.cached = 0  # bytes reserved but free: settle() gives them back (as empty_cache)
        self.used_pool = False

    def start(self) -> None:
        pass

    def reserved_bytes(self) -> int:
        return self.reserved

    def settle(self) -> None:
        self.reserved -= self.cached
        self.cached = 0

    def begin_sequence(self) -> dict[str, Any]:
        return {"slots": [None] * SLOTS}

    def run(self, st: dict[str, Any], op: Op) -> None:
        name, slots = op["op"], st["slots"]
        s = op.get("slot", 0)
        if name == "new" or (slots[s] is None and name in ("begin", "ctx")):
            slots[s] = {"state": "new", "mempool": False}
        g = slots[s]
        if name == "use_pool":
            self.used_pool = True
        if name in ("begin", "ctx"):
            if g["state"] != "new":
                raise RuntimeError("already owns a captured graph")
            g["state"], g["mempool"] = "capturing", op["pool"] == "mempool"
            if name == "ctx":
                g["state"] = "failed" if op["body"] in FAILS else "captured"
                if op["body"] in FAILS:
                    self._fail(g)
                    raise RuntimeError("capture failed in the body")
        elif name == "fail":
            capturing = [x for x in slots if x is not None and x["state"] == "capturing"]
            for x in capturing:
                x["state"] = "invalid"
            raise RuntimeError(f"{op['kind']} not permitted" + (" during capture" if capturing else ""))
        elif name == "end":
            if g is None or g["state"] not in ("capturing", "invalid"):
                raise RuntimeError("capture_end without capture_begin")
            if g["state"] == "invalid":
                self._fail(g)
                raise RuntimeError("operation not permitted when stream is capturing")
            g["state"] = "captured"
        elif name == "replay":
            if g is None or g["state"] != "captured":
                raise RuntimeError("replay without a capture")
            if "hang" in self.bugs and g["mempool"]:
                time.sleep(3600)
        elif name == "reset":
            if g is not None:
                if "abort" in self.bugs and g["state"] == "failed" and self.used_pool:
                    os.abort()
                g["state"] = "new"
        elif name in ENGINE_ONLY and "missing" in self.bugs:
            raise AttributeError(f"'CUDAGraph' object has no attribute {name!r}")

    def _fail(self, g: dict[str, Any]) -> None:
        g["state"] = "failed"
        if "leak" in self.bugs:
            self.reserved += 2 << 20

    def end_sequence(self, st: dict[str, Any]) -> None:
        st["slots"] = [None] * SLOTS
        self.settle()

    def fresh_capture_ok(self) -> bool:
        if "cache" in self.bugs and not self.cached:
            self.reserved += 2 << 20
            self.cached = 2 << 20
        return True


class TorchBackends:
    """The real backends: ``cgtool`` (cgtool.capture.graph) or ``torch`` (torch.cuda's own)."""

    def __init__(self, name: str, scratch: Path) -> None:
        self.name = name
        self.scratch = scratch

    def start(self) -> None:
        import torch

        self.torch = torch
        torch.cuda.init()
        self.dev = torch.cuda.current_device()
        if self.name == "cgtool":
            from cgtool.capture import graph as eng

            self.Graph = eng.Graph
            self.graph = eng.graph
            self.pool_handle = eng.graph_pool_handle
            self.mgc = eng.make_graphed_callables
        else:
            self.Graph = torch.cuda.CUDAGraph
            self.graph = torch.cuda.graph
            self.pool_handle = torch.cuda.graph_pool_handle
            self.mgc = torch.cuda.make_graphed_callables
        self.streams = [torch.cuda.Stream() for _ in range(SLOTS)]
        self.forks = [torch.cuda.Stream() for _ in range(SLOTS)]
        self.check_stream = torch.cuda.Stream()
        self._raw: list[Any] = []
        self.x = torch.arange(1 << 12, device="cuda", dtype=torch.float32)
        try:
            from cuda.bindings import runtime as rt

            self.rt = rt
        except ImportError:
            self.rt = None
        # Warm every kernel and stream the sequences use, so their one-off allocations are not
        # counted as a sequence's leak.
        for s in self.streams + self.forks + [self.check_stream]:
            with torch.cuda.stream(s):
                (self.x * 2 + 1).sum().item()
                torch.ones(1, device="cuda")
        self._mgc_warm()
        self.settle()

    def settle(self) -> None:
        """Free what can be freed: blocks whose frees the allocator deferred during a capture are
        handled by its next allocation outside any capture, once their events are done."""
        torch = self.torch
        gc.collect()
        for _ in range(2):
            torch.empty(1, device="cuda")
            torch.cuda.synchronize()
        torch.cuda.empty_cache()

    def reserved_bytes(self) -> int:
        return int(self.torch.cuda.memory_reserved())

    def _module(self) -> Any:
        torch = self.torch

        class Scale(torch.nn.Module):  # elementwise only: no cuBLAS workspace per stream
            def __init__(self) -> None:
                super().__init__()
                self.w = torch.nn.Parameter(torch.full((64,), 2.0, device="cuda"))

            def forward(self, a: Any) -> Any:
                return (a * self.w).relu()

        return Scale()

    def _mgc_warm(self) -> None:
        torch = self.torch
        m = self._module()
        a = torch.randn(8, 64, device="cuda", requires_grad=True)
        m(a).sum().backward()

    # -- one sequence
    def begin_sequence(self) -> dict[str, Any]:
        return {"g": [None] * SLOTS, "pools": [None] * POOLS, "keep": [], "outs": [None] * SLOTS,
                "hooks": []}

    def _g(self, st: dict[str, Any], s: int, keep_graph: bool = False) -> Any:
        if st["g"][s] is None:
            st["g"][s] = self.Graph(keep_graph=keep_graph)
        return st["g"][s]

    def _pool_arg(self, st: dict[str, Any], op: Op) -> Any:
        kind = op["pool"]
        if kind == "handle":
            return self.pool_handle()
        if kind == "mempool":
            p = op["p"]
            if st["pools"][p] is None:
                st["pools"][p] = self.torch.cuda.MemPool()
            # the engine takes the MemPool (and keeps it alive); torch 2.11 takes its id only
            return st["pools"][p] if self.name == "cgtool" else st["pools"][p].id
        if kind == "shared":
            other = st["g"][1 - op["slot"]]
            if other is None:
                raise LookupError("harness: no other graph to share a pool with")  # not counted
            return other.pool()
        return None

    def _fail(self, kind: str, s: int) -> None:
        torch = self.torch
        if kind == "sync":
            torch.cuda.synchronize()
        elif kind == "item":
            (self.x + 1).sum().item()
        elif kind == "malloc":
            rt = self.rt
            if rt is None:
                raise LookupError("harness: no cuda.bindings")
            err, ptr = rt.cudaMalloc(1 << 20)
            if int(err) != 0:
                raise RuntimeError(f"cudaMalloc: {err!r}")
            self._raw.append(ptr)  # freed after the sequence: cudaFree during a capture can block
        elif kind == "unjoined":
            f = self.forks[s]
            f.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(f):
                self._unjoined = self.x * 5
        elif kind == "default_stream":
            with torch.cuda.stream(torch.cuda.default_stream()):
                self._on_default = self.x * 7

    def _use_pool(self, st: dict[str, Any], p: int, nested: int | None) -> None:
        torch = self.torch
        if st["pools"][p] is None:
            st["pools"][p] = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(st["pools"][p]):
            st["keep"].append(self.x + 3)
            if nested is not None:
                if st["pools"][nested] is None:
                    st["pools"][nested] = torch.cuda.MemPool()
                with torch.cuda.use_mem_pool(st["pools"][nested]):
                    st["keep"].append(self.x + 4)

    def run(self, st: dict[str, Any], op: Op) -> None:
        torch = self.torch
        name = op["op"]
        s = op.get("slot", 0)
        with torch.cuda.stream(self.streams[s]):
            if name == "new":
                st["g"][s] = self.Graph(keep_graph=op["keep_graph"])
            elif name == "begin":
                g = self._g(st, s)
                g.capture_begin(pool=self._pool_arg(st, op), capture_error_mode=op["mode"])
            elif name == "work":
                st["outs"][s] = self.x * 2 + 1
            elif name == "rng":
                st["outs"][s] = torch.rand(64, device="cuda")
            elif name == "alloc":
                t = torch.empty(op["mb"] << 20, dtype=torch.uint8, device="cuda")
                if op["keep"]:
                    st["keep"].append(t)
                del t
            elif name == "fail":
                self._fail(op["kind"], s)
            elif name == "use_pool":
                self._use_pool(st, op["p"], op["nested"])
            elif name == "end":
                self._g(st, s).capture_end()
            elif name == "end_pre":
                self._g(st, s).capture_end_pre()
            elif name == "end_post":
                self._g(st, s).capture_end_post()
            elif name == "ctx":
                g = self._g(st, s)
                with self.graph(g, pool=self._pool_arg(st, op), stream=self.streams[s],
                                capture_error_mode=op["mode"]):
                    st["outs"][s] = self.x * 2 + 1
                    body = op["body"]
                    if body == "use_pool":
                        self._use_pool(st, op["p2"], None)
                    elif body in FAILS:
                        self._fail(body, s)
            elif name == "replay":
                self._g(st, s).replay()
            elif name == "reset":
                self._g(st, s).reset()
            elif name == "instantiate":
                self._g(st, s).instantiate()
            elif name == "debug_dump":
                g = self._g(st, s)
                if self.name == "torch":
                    g.enable_debug_mode()
                g.debug_dump(str(self.scratch / f"dump{s}.dot"))
            elif name == "get_graph_data":
                self._g(st, s).get_graph_data()
            elif name == "pool":
                self._g(st, s).pool()
            elif name == "pools":
                pools = self._g(st, s).pools()
                if not isinstance(pools, list):
                    raise TypeError(f"pools() returned {type(pools).__name__}, not list")
            elif name == "raw":
                g = self._g(st, s)
                g.raw_cuda_graph()
                g.raw_cuda_graph_exec()
            elif name == "hooks":
                g = self._g(st, s)

                def hook(_g: Any, fail: bool = op["raise"]) -> None:
                    if fail:
                        raise ValueError("a hook that raises")

                st["hooks"].append(g.register_capture_end_hook(hook))
                st["hooks"].append(g.register_replay_start_hook(hook))
                st["hooks"].append(g.register_post_instantiate_hook(hook))
            elif name == "mempool":
                st["pools"][op["p"]] = torch.cuda.MemPool()
            elif name == "del_pool":
                st["pools"][op["p"]] = None
                gc.collect()
            elif name == "del_graph":
                st["g"][s] = None
                gc.collect()
            elif name == "mgc":
                m = self._module()
                a = torch.randn(8, 64, device="cuda", requires_grad=True)
                gm = self.mgc(m, (a,), num_warmup_iters=1)
                out = gm(a)
                out.sum().backward()
                want = (a * m.w).relu()
                if not torch.equal(out, want):
                    raise AssertionError("make_graphed_callables: output differs from eager")
                del gm, out, m, a
            elif name == "gc":
                gc.collect()

    def end_sequence(self, st: dict[str, Any]) -> None:
        """Undo the sequence with the public API only: end captures still open, reset, drop all."""
        torch = self.torch
        for s in range(SLOTS):
            g = st["g"][s]
            with torch.cuda.stream(self.streams[s]):
                if g is not None and torch.cuda.is_current_stream_capturing():
                    try:
                        g.capture_end()
                    except Exception:
                        pass
                if g is not None:
                    try:
                        g.reset()
                    except Exception:
                        pass
        for h in st["hooks"]:
            try:
                h.remove()
            except Exception:
                pass
        st.clear()
        self._unjoined = self._on_default = None
        for ptr in self._raw:
            self.rt.cudaFree(ptr)
        self._raw.clear()
        for s in self.streams + self.forks:
            with torch.cuda.stream(s):
                if torch.cuda.is_current_stream_capturing():
                    raise Interrupted("a stream is still capturing after capture_end and reset")
        self.settle()

    def fresh_capture_ok(self) -> bool:
        torch = self.torch
        with torch.cuda.stream(self.check_stream):
            want = self.x * 3 + 1
            g = self.Graph()
            with self.graph(g, stream=self.check_stream):
                out = self.x * 3 + 1
            out.zero_()
            g.replay()
            torch.cuda.synchronize()
            ok = bool(torch.equal(out, want))
            g.reset()
            del g, out, want  # before settle(): a block still in use stays reserved into the next sequence
            # eager RNG still works and advances (torch 2.11 leaves its generator in capture mode
            # after a failed capture: eager CUDA RNG then raises)
            a, b = torch.rand(8, device="cuda"), torch.rand(8, device="cuda")
            ok = ok and not bool(torch.equal(a, b))
            del a, b
        self.settle()
        return ok


def make_backend(name: str, scratch: Path) -> Any:
    if name == "fake":
        return FakeBackend(os.environ.get("ENGINE_STATES_FAKE_BUGS", ""))
    return TorchBackends(name, scratch)


# --------------------------------------------------------------------------------------- child side
def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else "")[:200]


def run_sequence(backend: Any, seq: list[Op]) -> dict[str, Any]:
    """Run one sequence and the checks after it; the result record (status ok / broken)."""
    t0 = time.perf_counter()
    backend.settle()  # what the last check left cached is not this sequence's to give back
    before = backend.reserved_bytes()
    st = backend.begin_sequence()
    errors = []
    for i, op in enumerate(seq):
        try:
            backend.run(st, op)
        except LookupError:
            pass  # the harness could not set the call up (no graph to share a pool with): not counted
        except Exception as e:
            missing = isinstance(e, AttributeError) and op["op"] in ENGINE_ONLY
            errors.append({"i": i, "op": op["op"], "type": type(e).__name__, "msg": _first_line(e),
                           "missing_api": missing})
    status, detail = "ok", ""
    try:
        backend.end_sequence(st)
        after = backend.reserved_bytes()
        if not backend.fresh_capture_ok():
            status, detail = "broken", "a fresh capture + replay differs from eager, or eager RNG repeats"
    except Interrupted as e:
        status, detail, after = "broken", str(e), None
    except Exception as e:
        status, detail, after = "broken", f"{type(e).__name__}: {_first_line(e)}", None
    return {"status": status, "detail": detail, "errors": errors, "reserved_before": before,
            "reserved_after": after, "leaked_bytes": None if after is None else after - before,
            "seconds": round(time.perf_counter() - t0, 4)}


def _to_log(logpath: str) -> None:
    """Send this process's stdout and stderr (fds 1 and 2, C++ aborts included) to its own file.

    On a fatal signal (SIGABRT from a C++ ``terminate``, SIGSEGV) faulthandler writes the Python
    stack of every thread there too: the C++ trace alone names no Python line (3.12 inlines calls).
    """
    fd = os.open(logpath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    faulthandler.enable(file=sys.stderr, all_threads=True)


def worker_loop(backend_name: str, conn: Any, logpath: str) -> None:
    """A worker: receive ``{"id", "seq"}`` jobs on ``conn`` (its own pipe), send one result for each."""
    _to_log(logpath)
    backend = make_backend(backend_name, Path(tempfile.mkdtemp(prefix="engine_states_")))
    backend.start()
    gc.freeze()  # torch's own objects out of every later collection: gc.collect() in a sequence is cheap
    conn.send({"ready": True})
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        try:
            rec = run_sequence(backend, job["seq"])
        except BaseException as e:  # the harness itself failed: say so, do not hide it
            rec = {"status": "broken", "detail": "harness: " + "".join(traceback.format_exception(e))[-500:],
                   "errors": [], "leaked_bytes": None}
        rec["id"] = job["id"]
        conn.send(rec)
        if rec["status"] == "broken":
            return  # this process cannot be trusted for more sequences


def program_child(backend_name: str, program: Program, logpath: str) -> None:
    """A shrink attempt: run ``program`` in a fresh process; exit 0 (ran), 3 (broken), or die."""
    _to_log(logpath)
    backend = make_backend(backend_name, Path(tempfile.mkdtemp(prefix="engine_states_")))
    backend.start()
    gc.freeze()
    for seq in program:
        if run_sequence(backend, seq)["status"] == "broken":
            os._exit(3)
    os._exit(0)


def _context(backends: list[str]) -> Any:
    """Processes forked from a server that imported torch (CUDA untouched): a start costs a CUDA
    context, not an import of torch, so a dead worker is replaced in about a second."""
    preload = ["__main__"]
    if any(b != "fake" for b in backends):
        preload += ["torch", "cgtool.capture.graph"]
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(preload)
    return ctx


@dataclass
class Worker:
    """One worker process of one backend, with its own pipe and log file."""

    backend: str
    tag: str
    proc: Any
    conn: Any
    logpath: Path
    deadline: float
    job: dict[str, Any] | None = None
    history: list[list[Op]] = field(default_factory=list)
    ready: bool = False

    def log_tail(self, n: int = 1500) -> str:
        try:
            return self.logpath.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""


def run_all(backends: list[str], seeds: list[int], workers: int | dict[str, int], timeout: float, logdir: Path,
            n_ops: tuple[int, int] = (3, 16), seconds: float = 1e9, startup_timeout: float = 120.0,
            progress: float = 15.0) -> dict[str, Any]:
    """Run every seed's sequence on every backend; per backend the results and the killing programs.

    Nothing new starts after ``seconds``; the seeds left are reported as not run.
    """
    logdir.mkdir(parents=True, exist_ok=True)
    ctx = _context(backends)
    t0 = time.monotonic()
    queues = {b: list(seeds) for b in backends}
    results: dict[str, list[dict[str, Any]]] = {b: [] for b in backends}
    killers: dict[str, list[dict[str, Any]]] = {b: [] for b in backends}
    spawned = {b: 0 for b in backends}
    failed_starts = {b: 0 for b in backends}
    pool: list[Worker] = []

    def spawn(b: str) -> None:
        if not queues[b] or time.monotonic() - t0 > seconds:
            return
        spawned[b] += 1
        tag = f"{b}-w{spawned[b]}"
        parent, child = ctx.Pipe()
        logpath = logdir / f"{tag}.log"
        p = ctx.Process(target=worker_loop, args=(b, child, str(logpath)), daemon=True)
        p.start()
        child.close()
        pool.append(Worker(b, tag, p, parent, logpath, time.monotonic() + startup_timeout))

    def feed(w: Worker) -> None:
        if queues[w.backend] and time.monotonic() - t0 <= seconds:
            seed = queues[w.backend].pop(0)
            w.job = {"id": seed, "seq": generate(seed, n_ops)}
            w.conn.send(w.job)
            w.deadline = time.monotonic() + timeout
        else:
            w.job = None
            w.conn.send(None)

    def retire(w: Worker, status: str | None, detail: str) -> None:
        pool.remove(w)
        w.conn.close()
        if not w.ready and status is not None:
            failed_starts[w.backend] += 1
            if failed_starts[w.backend] >= 3:
                raise SystemExit(f"engine_states: 3 {w.backend} workers ended before they were ready; the "
                                 f"last one's log ({w.logpath}):\n{w.log_tail()}")
        if w.job is not None and status is not None:
            results[w.backend].append({"id": w.job["id"], "status": status, "detail": detail, "errors": [],
                                       "leaked_bytes": None})
            killers[w.backend].append({"id": w.job["id"], "status": status, "detail": detail,
                                       "program": w.history + [w.job["seq"]], "log": w.log_tail()})
        spawn(w.backend)

    def handle(w: Worker, msg: dict[str, Any]) -> None:
        if msg.get("ready"):
            w.ready = True
            feed(w)
            return
        assert w.job is not None and msg["id"] == w.job["id"]
        results[w.backend].append(msg)
        w.history.append(w.job["seq"])
        if msg["status"] == "broken":
            killers[w.backend].append({"id": msg["id"], "status": "broken", "detail": msg["detail"],
                                       "program": list(w.history), "log": w.log_tail()})
            w.job = None  # the worker ends by itself
        else:
            feed(w)

    for b in backends:
        for _ in range(min(workers if isinstance(workers, int) else workers[b], len(seeds))):
            spawn(b)
    next_report = time.monotonic() + progress
    while pool:
        now = time.monotonic()
        wait_s = max(0.0, min(min(w.deadline for w in pool) - now, 1.0))
        objs: dict[Any, Worker] = {}
        for w in pool:
            objs[w.conn] = w
            objs[w.proc.sentinel] = w
        for obj in mp_wait(list(objs), timeout=wait_s):
            w = objs[obj]
            if w not in pool:
                continue
            while w.conn.poll():  # messages first: a worker may answer, then end
                try:
                    handle(w, w.conn.recv())
                except (EOFError, OSError):
                    break
            if not w.proc.is_alive():
                w.proc.join()
                code = w.proc.exitcode
                if w.job is None:
                    retire(w, None, "")
                else:
                    how = f"signal {-code}" if code is not None and code < 0 else f"exit status {code}"
                    retire(w, "died", how + ("" if w.ready else " (before it was ready)"))
        now = time.monotonic()
        for w in pool:
            if now > w.deadline and (w.job is not None or not w.ready):
                w.proc.kill()
                w.proc.join()
                retire(w, "hung", f"no answer in {timeout if w.ready else startup_timeout:.0f} s")
        if now > next_report:
            next_report = now + progress
            print(f"[{now - t0:5.0f} s] " + " | ".join(
                f"{b}: {len(results[b])}/{len(seeds)} done, "
                + ", ".join(f"{k} {sum(r['status'] == k for r in results[b])}" for k in ("died", "hung", "broken"))
                for b in backends), file=sys.stderr, flush=True)
    not_run = {b: len(queues[b]) for b in backends}
    return {"results": results, "killers": killers, "not_run": not_run, "workers_started": spawned}


def shrink_killers(killers: list[dict[str, Any]], backend: str, logdir: Path, timeout: float,
                   limit: int, budget: int, seconds: float) -> list[dict[str, Any]]:
    """Shrink the first ``limit`` killing programs of one backend, each attempt in a fresh process.

    Deaths first, then hangs (each attempt at a hang costs ``timeout``); nothing is tried after
    ``seconds``, and a program whose shrinking was cut short says so (``complete``: false).
    """
    out: list[dict[str, Any]] = []
    stop = time.monotonic() + seconds
    todo = ([k for k in killers if k["status"] == "died"] + [k for k in killers if k["status"] == "hung"])[:limit]
    ctx = _context([backend])
    n = [0]

    def ends(program: Program) -> tuple[str, int | None]:
        n[0] += 1
        logpath = logdir / f"{backend}-shrink{n[0]}.log"
        p = ctx.Process(target=program_child, args=(backend, program, str(logpath)), daemon=True)
        p.start()
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join()
            return "hung", None
        code = p.exitcode
        if code is not None and code < 0:
            return "died", -code
        return "exit", code

    for k in todo:
        want = k["status"]

        def kills(program: Program, want: str = want) -> bool:
            if time.monotonic() > stop:
                raise TimeoutError
            end, code = ends(program)
            if want == "died":
                return end == "died" or (end == "exit" and code not in (0, 3))
            return end == want

        try:
            reproduced = kills(k["program"])
        except TimeoutError:
            break
        small, attempts, complete = k["program"], 0, True
        if reproduced:
            best = [small]

            def tracked(program: Program, best: list[Program] = best) -> bool:
                hit = kills(program)
                if hit:
                    best[0] = program
                return hit

            try:
                small, attempts = shrink(k["program"], tracked, budget)
            except TimeoutError:
                small, complete = best[0], False
        out.append({"id": k["id"], "status": want, "reproduced_in_fresh_process": reproduced,
                    "complete": complete,
                    "original_calls": sum(len(q) for q in k["program"]),
                    "shrunk_calls": sum(len(q) for q in small), "attempts": attempts, "program": small})
    return out


def parse_workers(spec: str, backends: list[str]) -> dict[str, int]:
    """``N`` (every backend) or ``name=N,...`` (a backend not named gets the first number given)."""
    if "=" not in spec:
        return {b: int(spec) for b in backends}
    given = {k.strip(): int(v) for k, v in (part.split("=", 1) for part in spec.split(",") if part.strip())}
    unknown = set(given) - set(backends)
    if unknown:
        raise SystemExit(f"--workers names {sorted(unknown)}, which --backends does not run ({backends})")
    first = next(iter(given.values()))
    return {b: given.get(b, first) for b in backends}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--backends", default="cgtool,torch", help="comma list of cgtool, torch, fake")
    ap.add_argument("--sequences", type=int, default=2000, help="sequences per backend")
    ap.add_argument("--seed", type=int, default=0, help="first seed (sequence i has seed SEED+i)")
    ap.add_argument("--workers", default="6",
                    help="worker processes per backend: N, or per backend as cgtool=5,torch=9 (a backend "
                    "whose workers die often needs more to run as many sequences)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds a sequence may take before it counts as a hang")
    ap.add_argument("--min-ops", type=int, default=3)
    ap.add_argument("--max-ops", type=int, default=16)
    ap.add_argument("--shrink", type=int, default=3, help="killing programs to shrink per backend")
    ap.add_argument("--shrink-budget", type=int, default=60, help="fresh-process attempts per shrink")
    ap.add_argument("--shrink-seconds", type=float, default=90.0, help="time for all shrinking (backends in parallel)")
    ap.add_argument("--shrink-timeout", type=float, default=15.0, help="seconds before a shrink attempt counts as a hang")
    ap.add_argument("--json", type=Path, default=None, help="write every result here")
    ap.add_argument("--logs", type=Path, default=None, help="children's stderr files (default: a temp folder)")
    ap.add_argument("--seconds", type=float, default=1e9,
                    help="start no new sequence after this many seconds (the rest are reported as not run)")
    args = ap.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    logdir = args.logs or Path(tempfile.mkdtemp(prefix="engine_states_logs_"))
    seeds = list(range(args.seed, args.seed + args.sequences))
    t0 = time.perf_counter()
    workers = parse_workers(args.workers, backends)
    run = run_all(backends, seeds, workers, args.timeout, logdir, (args.min_ops, args.max_ops), args.seconds)
    t_run = time.perf_counter() - t0
    with ThreadPoolExecutor(len(backends)) as ex:  # each backend's shrinking in its own children
        futs = {b: ex.submit(shrink_killers, run["killers"][b], b, logdir, args.shrink_timeout, args.shrink,
                             args.shrink_budget, args.shrink_seconds) for b in backends}
        shrunk = {b: f.result() for b, f in futs.items()}
    tallies = {b: tally(run["results"][b]) for b in backends}
    table = render_table(tallies)
    print(table)
    print(f"\n{len(seeds)} sequences per backend (seeds {seeds[0]}..{seeds[-1]}), workers "
          + ", ".join(f"{b} {n}" for b, n in workers.items()) + f", {t_run:.1f} s; shrinking {time.perf_counter() - t0 - t_run:.1f} s; not run (--seconds): "
          + ", ".join(f"{b} {run['not_run'][b]}" for b in backends)
          + "; workers started: " + ", ".join(f"{b} {run['workers_started'][b]}" for b in backends))
    for b in backends:
        for s in shrunk[b]:
            print(f"[{b}] seed {s['id']} {s['status']}: shrunk {s['original_calls']} -> {s['shrunk_calls']} calls "
                  f"({s['attempts']} attempts{'' if s['complete'] else ', cut short by --shrink-seconds'}; "
                  f"reproduced in a fresh process: {s['reproduced_in_fresh_process']})")
            for qi, q in enumerate(s["program"]):
                print(f"    sequence {qi}: " + "; ".join(json.dumps(o, separators=(",", ":")) for o in q))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "backends": backends, "seeds": [seeds[0], seeds[-1]], "workers": workers,
            "timeout_s": args.timeout, "ops": [args.min_ops, args.max_ops], "run_seconds": round(t_run, 1),
            "tallies": {b: vars(t) for b, t in tallies.items()}, "table": table,
            "not_run": run["not_run"], "workers_started": run["workers_started"],
            "killers": run["killers"], "shrunk": shrunk, "results": run["results"],
        }, indent=1))
    bad = tallies["cgtool" if "cgtool" in tallies else backends[0]]
    return 1 if bad.deaths or bad.hangs or bad.broken or bad.leaks or run["not_run"][backends[0]] else 0


if __name__ == "__main__":
    sys.exit(main())
