"""Run PyTorch's own CUDA-graph tests against cgtool's engine, without touching the tests.

``install("engine")`` points the names the tests use at the engine (``cgtool.capture.graph``):
``torch.cuda.CUDAGraph``, ``torch.cuda.graph``, ``torch.cuda.graph_pool_handle``,
``torch.cuda.make_graphed_callables``, ``torch.cuda.export_dot``, ``torch.cuda.export_graph_data``
and ``torch.cuda.graphs.register_graph_instantiate_hook`` (in ``torch.cuda`` and ``torch.cuda.graphs``).
``install("torch")`` patches nothing of the graph API: it is the baseline run of torch alone.

Both modes add the test-support names newer test files import and an older torch lacks (only where
missing, never replacing torch's own), so a test module imports on torch 2.11 and each test then
passes or fails on the graph API it exercises:

- ``torch.testing._internal.common_utils``: ``requires_cuda_python_bindings``, ``cuda_python_error_check``,
  ``TEST_CUDA_PYTHON_BINDINGS``, ``TEST_CUDAMALLOCASYNC``; ``skipIfRocm`` made to work on a class (torch 2.11's wraps it in a
  function, which silently drops the class from collection);
- ``torch.cuda._utils``: ``_check_cuda_bindings``, ``_check_cuda_bindings_driver``;
- ``torch.cuda._graph_annotations`` / ``torch.cuda.graph_annotations``: the names
  test_cuda_graph_utils.py imports (annotation helpers are stubs that raise: no test in scope calls
  them). ``_is_tools_id_unavailable`` (TestGetGraphData's class-level skip) answers for the API under
  test: torch's own probe in "torch" mode, whether the engine has an id source in "engine" mode;
- ``torch.autograd.graph.set_warn_on_accumulate_grad_stream_mismatch``: a no-op where missing.

Loaded in every Python process of a run (tests start subprocesses) by ``sitecustomize.py`` beside it,
when ``CGTOOL_TORCH_SHIM`` is "torch" or "engine".
"""

from __future__ import annotations

import importlib
import sys
import types
import unittest
from typing import Any, Callable

ENGINE_NAMES = (
    "CUDAGraph",
    "graph",
    "graph_pool_handle",
    "make_graphed_callables",
    "export_dot",
    "export_graph_data",
    "register_graph_instantiate_hook",
)

MODE = ""


def install(mode: str) -> None:
    global MODE
    if mode not in ("torch", "engine"):
        raise ValueError(f"CGTOOL_TORCH_SHIM must be 'torch' or 'engine', not {mode!r}")
    MODE = mode
    import torch

    _compat(torch, engine=mode == "engine")
    if mode == "engine":
        _point_at_engine(torch)


def _point_at_engine(torch: Any) -> None:
    import torch.cuda.graphs as tg

    from cgtool.capture import graph as eng

    eng.torch_originals(torch)  # remember torch's classes before they are replaced
    for name in ENGINE_NAMES:
        obj = getattr(eng, "Graph" if name == "CUDAGraph" else name)
        setattr(torch.cuda, name, obj)
        setattr(tg, name, obj)


# ---------------------------------------------------------------------------------------- compat
def _module(name: str) -> types.ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError:
        mod = types.ModuleType(name)
        mod.__doc__ = "stub added by cgtool_torch_shim: this torch lacks the module"
        sys.modules[name] = mod
        parent, _, child = name.rpartition(".")
        setattr(importlib.import_module(parent), child, mod)
        return mod


def _missing(mod: types.ModuleType, name: str, value: Any) -> None:
    if not hasattr(mod, name):
        setattr(mod, name, value)


def _not_here(name: str) -> Callable[..., Any]:
    def stub(*a: Any, **k: Any) -> Any:
        raise NotImplementedError(f"{name}: not in this torch (stub from cgtool_torch_shim)")

    return stub


def _bindings_check(module: str, success: tuple[str, str]) -> Callable[[Any], Any]:
    """Unpack ``(err, *out)`` of a cuda.bindings call; raise unless ``err`` is the success value."""

    def check(result: Any) -> Any:
        enum_mod = importlib.import_module(f"cuda.bindings.{module}")
        err, *out = result
        ok = getattr(getattr(enum_mod, success[0]), success[1])
        if err != ok:
            raise RuntimeError(f"cuda.bindings {module} call failed: {err!r}")
        if not out:
            return None
        return out[0] if len(out) == 1 else tuple(out)

    return check


def _driver_has_tools_ids() -> bool:
    try:
        from cuda.bindings import runtime as rt
    except ImportError:
        return False
    err, ver = rt.cudaDriverGetVersion()
    return int(err) == 0 and ver >= 13010 and hasattr(rt, "cudaGraphNodeGetToolsId")


def _engine_has_ids() -> bool:
    try:
        from cgtool.capture.export import id_source_available

        return id_source_available() != "none"
    except Exception:
        return False


def _compat(torch: Any, *, engine: bool) -> None:
    cu = importlib.import_module("torch.testing._internal.common_utils")
    try:
        import cuda.bindings.runtime  # noqa: F401

        has_bindings = True
    except ImportError:
        has_bindings = False
    _missing(cu, "TEST_CUDA_PYTHON_BINDINGS", has_bindings)
    _missing(
        cu,
        "requires_cuda_python_bindings",
        unittest.skipUnless(has_bindings, "cuda.bindings (cuda-python) is not installed"),
    )
    _missing(cu, "cuda_python_error_check", _bindings_check("runtime", ("cudaError_t", "cudaSuccess")))
    _missing(
        cu,
        "TEST_CUDAMALLOCASYNC",
        torch.cuda.is_available() and torch.cuda.get_allocator_backend() == "cudaMallocAsync",
    )
    _missing(cu, "requires_cuda", unittest.skipUnless(torch.cuda.is_available(), "CUDA not available"))
    orig_skip = cu.skipIfRocm
    if not getattr(orig_skip, "_cgtool_class_aware", False):

        def skipIfRocm(func: Any = None, *, msg: str = "test doesn't currently work on the ROCm stack") -> Any:
            def deco(f: Any) -> Any:
                if isinstance(f, type):
                    return unittest.skip(f"skipIfRocm: {msg}")(f) if cu.TEST_WITH_ROCM else f
                return orig_skip(f, msg=msg)

            return deco(func) if func is not None else deco

        skipIfRocm._cgtool_class_aware = True  # type: ignore[attr-defined]
        cu.skipIfRocm = skipIfRocm

    utils = importlib.import_module("torch.cuda._utils")
    _missing(utils, "_check_cuda_bindings", _bindings_check("runtime", ("cudaError_t", "cudaSuccess")))
    _missing(utils, "_check_cuda_bindings_driver", _bindings_check("driver", ("CUresult", "CUDA_SUCCESS")))

    ga = _module("torch.cuda._graph_annotations")
    for name in (
        "_get_annotatable_types",
        "_get_node_type",
        "_get_stream_id",
        "_rekey_annotations",
        "_reset_kernel_annotations",
        "mark_stream",
        "resolve_and_remap",
        "resolve_pending_annotations",
    ):
        _missing(ga, name, _not_here(f"torch.cuda._graph_annotations.{name}"))
    _missing(ga, "_is_tools_id_unavailable", lambda: not _driver_has_tools_ids())
    if engine:
        # TestGetGraphData's class-level skip asks whether get_graph_data can have ids: for the
        # engine that is CUPTI or the driver, not only the 13.1 driver call torch needs.
        ga._is_tools_id_unavailable = lambda: not _engine_has_ids()
    pub = _module("torch.cuda.graph_annotations")
    for name in ("clear_kernel_annotations", "get_kernel_annotations", "mark_kernels"):
        _missing(pub, name, _not_here(f"torch.cuda.graph_annotations.{name}"))
    _missing(pub, "is_available", lambda: False)

    ag = importlib.import_module("torch.autograd.graph")
    _missing(ag, "set_warn_on_accumulate_grad_stream_mismatch", lambda enabled: None)
