"""What `cgtool record` takes from torch, against the torch installed here (CI: the CPU build of
torch 2.13; the GPU machine: torch 2.11), so that a torch release that renames one of them fails
here rather than leaving recordings without their names:

* torch.compile's "skipping cudagraphs due to ..." messages, through the logger the recorder listens to;
* the names of open ``torch.profiler.record_function`` ranges (the recorder wraps the class);
* the autograd node a backward pass is running (``torch._C._current_autograd_node``);
* the ``torch.cuda.graph`` context manager holding its ``CUDAGraph`` as ``self.cuda_graph`` (the
  pool of a graph is read from it) and the ``CUDAGraph.pool()`` method;
* CUDA graph trees' ``CUDAGraphNode._record`` (its ``inputs``, less ``static_input_idxs``: the shapes a
  graph was recorded for; ``record_function``'s ``new_inputs`` is cleared before the capture) and
  ``deferred_cudagraphify`` (its ``int_key``);
* Inductor's ``_compile_fx_inner`` and ``PyCodeCache.load_by_key_path`` (compiled code -> the model's
  lines and nn.Module paths), and the FX nodes' ``stack_trace``/``nn_module_stack``/``from_node``;
* the profiler's ``_prepare_profiler``/``_enable_profiler``/``_disable_profiler`` (the recorder gives
  CUPTI up to the program's own torch.profiler).
"""

import inspect

import pytest

torch = pytest.importorskip("torch")


def test_cudagraph_skip_messages_reach_the_recorder(tmp_path):
    from torch._inductor import cudagraph_utils

    from cgtool.capture.record.recorder import Recorder

    rec = Recorder(str(tmp_path), program=["prog.py"])
    rec._install_skip_handler()
    cudagraph_utils.log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to mutated inputs (test)")
    assert [s.reason for s in rec.skips] == ["skipping cudagraphs due to mutated inputs (test)"]
    site = rec.skips[0].site
    assert site is not None and site.file == __file__  # the line that was being compiled: this test's


def test_record_function_ranges_are_named():
    from cgtool.capture.record import attribution

    attribution.track_ranges()
    with torch.autograd.profiler.record_function("outer"):
        with torch.profiler.record_function("inner"):
            assert attribution.current_range() == "inner"
        assert attribution.current_range() == "outer"
    assert attribution.current_range() is None


def test_the_autograd_node_of_a_backward_pass():
    from cgtool.capture.record import attribution

    seen = []
    x = torch.ones(3, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: seen.append(attribution.autograd_op()))
    y.sum().backward()
    assert attribution.autograd_op() is None  # not in a backward pass
    assert seen and seen[0] and seen[0].endswith("Backward0"), seen


def test_graph_context_manager_holds_its_cuda_graph():
    src = inspect.getsource(torch.cuda.graphs.graph.__exit__)
    assert "self.cuda_graph" in src
    assert callable(getattr(torch.cuda.CUDAGraph, "pool", None))


def test_cudagraph_trees_capture_functions_are_found():
    from torch._inductor import cudagraph_trees

    from cgtool.capture.record import attribution

    attribution.track_trees()
    names = {c.co_name for c in attribution._TREE_KEEP if c.co_filename == cudagraph_trees.__file__}
    assert names == {"_record", "record_function", "deferred_cudagraphify"}, names
    rf = inspect.signature(cudagraph_trees.CUDAGraphTreeManager.record_function)
    assert "new_inputs" in rf.parameters
    assert "inputs" in inspect.signature(cudagraph_trees.CUDAGraphNode._record).parameters
    assert "static_input_idxs" in inspect.getsource(cudagraph_trees.CUDAGraphNode._record)
    init = inspect.getsource(cudagraph_trees.CUDAGraphNode.__init__)
    assert init.index("inputs.clear()") < init.index("self._record("), "the caller's list is empty at capture"
    (deferred,) = [c for c in attribution._TREE_KEEP if c.co_name == "deferred_cudagraphify"]
    assert "int_key" in deferred.co_varnames


def test_the_profiler_entry_points_the_recorder_wraps():
    import torch.autograd.profiler as P

    for name in ("_prepare_profiler", "_enable_profiler", "_disable_profiler"):
        assert callable(getattr(P, name, None)), name
    src = inspect.getsource(P.profile._prepare_trace) + inspect.getsource(P.profile._start_trace)
    assert "_prepare_profiler(" in src and "_enable_profiler(" in src  # looked up in the module at call time


def test_inductor_entry_points_the_recorder_hooks():
    from torch._inductor import codecache, compile_fx

    assert callable(compile_fx._compile_fx_inner)
    assert "_compile_fx_inner" in inspect.getsource(compile_fx.compile_fx_inner)
    assert "path" in inspect.signature(codecache.PyCodeCache.load_by_key_path).parameters


@pytest.mark.slow
@pytest.mark.subprocess  # torch.compile starts its compile workers
def test_compiled_code_is_mapped_to_the_model(tmp_path, monkeypatch):
    """torch.compile on the CPU: every kernel's Source Nodes name a model line and module."""
    import re

    from cgtool.capture.record import inductor

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    inductor.track_compiled_code()

    class Blk(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.relu(self.q_proj(x))  # LINE_Q

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([Blk(), Blk()])

        def forward(self, x):
            for b in self.layers:
                x = b(x)
            return x

    torch._dynamo.reset()
    torch.compile(M())(torch.randn(2, 8))
    line = next(i + 1 for i, t in enumerate(open(__file__).read().splitlines()) if "# LINE_Q" in t)
    files = [f for f in inductor._BY_FILE if str(tmp_path) in f]
    assert files
    seen = set()
    for f in files:
        for m in re.finditer(r"Source Nodes: \[(.*?)\]", open(f).read()):
            names = tuple(n.strip() for n in m.group(1).split(","))
            for site in inductor.model_sites(f, names):
                seen.add((site["file"], site["line"], site["module_path"]))
    assert (__file__, line, "layers.0.q_proj") in seen and (__file__, line, "layers.1.q_proj") in seen, seen
