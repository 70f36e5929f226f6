"""Graph export: ``get_graph_data()``'s schema from a live cudaGraph_t and its cudaGraphExec_t.

The reads (every driver and CUPTI call, and where the tools ids come from) are
``capture/graphread.py``'s; :func:`build` turns what they read into the document without a CUDA
call. The per-node lists of dependencies and dependents and the node dicts are built in C where
``capture/_graphread.c`` is built (in Python where it is not), with the cyclic garbage collector
paused meanwhile. The result is the same JSON as the export before the compiled read
(``benchmarks/export_reference.py`` keeps that export as the oracle of the check on the GPU machine,
``tests/test_export_cpu.py`` runs both reads over a stand-in driver).
"""

from __future__ import annotations

import functools
import gc
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from cgtool._version import __version__
from cgtool.capture import _fastcuda
from cgtool.capture._deps import check, require_bindings
from cgtool.artifacts.graph import LOW32, SCHEMA_VERSION
# The reads: what an export asks the driver and CUPTI. Named here too, for the export's callers.
from cgtool.capture.graphread import (  # noqa: F401
    _KPARAMS_DTYPE, _child_summary, _func_name, _function, _get_edges, _get_nodes, _installed,
)
from cgtool.capture.graphread import QuickRead as QuickRead, RawGraph as RawGraph, complete as complete  # noqa: F401
from cgtool.capture.graphread import driver_has_tools_ids as driver_has_tools_ids  # noqa: F401
from cgtool.capture.graphread import driver_may_have_tools_ids as driver_may_have_tools_ids  # noqa: F401
from cgtool.capture.graphread import id_source_available as id_source_available  # noqa: F401
from cgtool.capture.graphread import read_graph as read_graph, read_quick as read_quick  # noqa: F401

@dataclass(frozen=True)
class Export:
    """One export: ``data`` in get_graph_data()'s schema (plus the ``cgtool`` block when asked),
    and how many nodes of each ``node_type`` it holds (counted in the same pass)."""

    data: dict[str, Any]
    type_counts: dict[str, int]


def graph_data(
    raw_graph: int, raw_exec: int, *, with_meta: bool = True, id_source: str = "auto", impl: str = "auto",
    with_environment: bool = True, handles_out: list[int] | None = None, cupti: Any = None,
) -> dict[str, Any]:
    """The export of the template ``raw_graph`` as instantiated into ``raw_exec``.

    The result has exactly get_graph_data()'s keys, plus ``"cgtool"`` when ``with_meta``.
    ``id_source`` forces "driver" or "cupti" (for tests); "auto" prefers the driver.
    ``impl`` picks the per-node calls: "ctypes" (fast: the compiled helper's one-call read where it is
    built), "map" (ctypes, column by column from Python), "bindings" (cuda.bindings), "auto".
    ``with_environment=False`` leaves ``cgtool.environment`` out (the recorder adds it off the
    CUDA callback); ``handles_out`` receives the node handles, in the order of ``nodes``.
    ``cupti``: what gives CUPTI's ids where the driver cannot (cupti-python's module by default;
    the recorder passes ``graphread.CuptiIds``, which may add a batch ``graph_node_ids``).
    """
    return export(raw_graph, raw_exec, with_meta=with_meta, id_source=id_source, impl=impl,
                  with_environment=with_environment, handles_out=handles_out, cupti=cupti).data


def export(
    raw_graph: int, raw_exec: int, *, with_meta: bool = True, id_source: str = "auto", impl: str = "auto",
    with_environment: bool = True, handles_out: list[int] | None = None, cupti: Any = None,
) -> Export:
    """:func:`graph_data` with the node-type counts of the same pass."""
    # The export allocates a few containers per node and keeps them all: every cyclic-GC run it
    # triggers finds nothing to free, yet a full one walks every object of the process (torch's
    # included). Collection waits until the export is built (measured in bench_export.py).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _export(int(raw_graph), int(raw_exec), with_meta, id_source, impl, with_environment, handles_out,
                       cupti)
    finally:
        if gc_was_enabled:
            gc.enable()


def _export(raw_graph: int, raw_exec: int, with_meta: bool, id_source: str, impl: str,
            with_environment: bool, handles_out: list[int] | None, cupti_ids: Any = None) -> Export:
    raw = read_graph(raw_graph, raw_exec, with_meta=with_meta, id_source=id_source, impl=impl, cupti=cupti_ids)
    if handles_out is not None:
        handles_out.extend(raw.handles)
    return build(raw, with_meta=with_meta, with_environment=with_environment)


def build(raw: RawGraph | QuickRead, *, with_meta: bool = True, with_environment: bool = True) -> Export:
    """The export document from what :func:`read_graph` (or :func:`read_quick`) read: no CUDA call."""
    if isinstance(raw, QuickRead):
        raw = complete(raw)
    names, handles, n = raw.names, raw.handles, len(raw.handles)
    kernel_name = names.get(raw.kernel_t, "kernel")
    batch = _fastcuda._batch()  # the compiled helper, where it is built: adjacency and dicts in C
    if batch is not None:
        dependencies, dependents = batch.adjacency(handles, raw.frm, raw.to)
    else:
        dependencies, dependents = _adjacency(handles, raw.frm.tolist(), raw.to.tolist())
    col = np.frombuffer(memoryview(raw.params), dtype=_KPARAMS_DTYPE) if n else np.zeros(0, _KPARAMS_DTYPE)
    funcs = col["func"].tolist()
    for i in raw.refused:
        funcs[i] = 0  # whatever a refusing call left in its slot is not a function
    funcs_known = dict(raw.funcs_known)
    for f, name in raw.func_names.items():  # demangling: once per function
        funcs_known[f] = _function(name)
    knames = [funcs_known[f][0] for f in funcs]
    tnames = [kernel_name] * n
    other_types = raw.other_types
    for i, t in other_types.items():
        tnames[i] = names.get(t) or names.setdefault(t, f"unknown_{t}")
        knames[i] = None
    for i, (kname, _) in raw.by_bindings.items():
        knames[i] = kname

    exec_id = raw.exec_id
    local = raw.ids & np.uint64(LOW32)
    locals_ = local.tolist()
    tools = (local | np.uint64(exec_id << 32)).tolist()
    if batch is not None:  # same keys, same order as the comprehension
        infos = batch.dicts(_INFO_KEYS, (list(range(n)), tnames, tools, [exec_id] * n, locals_, knames, dependencies,
                                         dependents), (False,) * 8)
    else:
        infos = [{"index": i, "node_type": t, "tools_id": tid, "graph_id": exec_id, "node_id": loc,
                  "kernel_name": k, "dependencies": d, "dependents": e}
                 for i, t, tid, loc, k, d, e in zip(range(n), tnames, tools, locals_, knames, dependencies, dependents)]
    extras: list[dict[str, Any]] = []
    if with_meta:
        dms = [funcs_known[f][1] for f in funcs]
        if batch is not None:
            extras = batch.dicts(_EXTRA_KEYS, (col["grid"].tolist(), col["block"].tolist(), col["smem"].tolist(), dms),
                                 (False, False, False, True))
        else:
            extras = [{"grid": g, "block": b, "shared_mem": sm} if dm is None else
                      {"grid": g, "block": b, "shared_mem": sm, "demangled": dm}
                      for g, b, sm, dm in zip(col["grid"].tolist(), col["block"].tolist(), col["smem"].tolist(), dms)]
        for i in other_types:
            extras[i] = raw.children.get(i, {})
        for i, (_, kextra) in raw.by_bindings.items():
            extras[i] = kextra
    export_s = time.perf_counter() - raw.t0

    out: dict[str, Any] = {"exec_graph_id": exec_id, "nodes": infos}
    if with_meta:
        out["cgtool"] = {
            "schema_version": SCHEMA_VERSION,
            "id_source": raw.source,
            "environment": environment() if with_environment else {},
            "timings": {"export_s": export_s},
            "nodes": extras,
        }
    counts = {names[t]: c for t, c in Counter(other_types.values()).items()}
    if n > len(other_types):
        counts[kernel_name] = counts.get(kernel_name, 0) + n - len(other_types)
    return Export(out, counts)


_INFO_KEYS = ("index", "node_type", "tools_id", "graph_id", "node_id", "kernel_name", "dependencies", "dependents")
_EXTRA_KEYS = ("grid", "block", "shared_mem", "demangled")

def _adjacency(handles: list[int], frm: list[int], to: list[int]) -> tuple[list[list[int]], list[list[int]]]:
    """(dependencies, dependents) of each node: node indices in the order the edge list gives them.

    Handles become indices through one dict and two C-level ``map()``s; each edge is then two
    appends. Not a numpy grouping (sorted search, stable sorts, one slice per list): its dozen small
    numpy calls cost more than this loop (docs/performance.md#hand-written-code)."""
    n = len(handles)
    deps: list[list[int]] = [[] for _ in range(n)]
    dents: list[list[int]] = [[] for _ in range(n)]
    if not frm:
        return deps, dents
    index = dict(zip(handles, range(n)))
    try:
        src = list(map(index.__getitem__, frm))
        dst = list(map(index.__getitem__, to))
    except KeyError:  # edges to nodes outside the list are left out
        pairs = [(index[a], index[b]) for a, b in zip(frm, to) if a in index and b in index]
        src, dst = [a for a, _ in pairs], [b for _, b in pairs]
    for a, b in zip(src, dst):
        dents[a].append(b)
        deps[b].append(a)
    return deps, dents


def environment(device: int | None = None) -> dict[str, Any]:
    """The environment fingerprint recorded in every artifact (a copy of the process's one):
    :func:`cuda_environment` and :func:`host_environment` together.

    ``device``: the CUDA device index; the calling thread's current device when None.
    """
    import torch

    dev = torch.cuda.current_device() if device is None else int(device)
    return {**cuda_environment(dev), **host_environment()}


@functools.lru_cache(maxsize=8)
def cuda_environment(dev: int) -> dict[str, Any]:
    """What torch and the CUDA runtime say about device ``dev`` (CUDA calls: make them on the
    thread that works on the device; ``cgtool record`` does, in its callback). Cached."""
    import torch

    rt, _ = require_bindings("Graph export")
    props = torch.cuda.get_device_properties(dev)
    drv_ver = check(rt.cudaDriverGetVersion(), "cudaDriverGetVersion")
    rt_ver = check(rt.cudaRuntimeGetVersion(), "cudaRuntimeGetVersion")
    return {
        "cgtool": __version__,
        "torch": str(torch.__version__),
        "torch_cuda": None if torch.version.cuda is None else str(torch.version.cuda),
        "cuda_runtime": rt_ver,
        "cuda_driver": drv_ver,
        "device": str(props.name),
        "device_index": dev,
        "capability": list(torch.cuda.get_device_capability(dev)),
        "sm_count": int(props.multi_processor_count),
        "CUDA_DEVICE_MAX_CONNECTIONS": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
    }


@functools.lru_cache(maxsize=1)
def host_environment() -> dict[str, Any]:
    """The driver's version string (NVML) and the installed package versions: no CUDA call, so any
    thread may ask. Cached: NVML initialisation alone is slow."""
    return {
        "driver_version": _nvml_driver(),
        # installed, not imported: `cgtool record` runs without loading it (its import cost:
        # docs/performance.md#hand-written-code)
        "cupti_python": _pkg_version("cupti-python") if _installed("cupti") else None,
        "cuda_bindings": _pkg_version("cuda-bindings"),
    }


def _pkg_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _nvml_driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:
        return None
