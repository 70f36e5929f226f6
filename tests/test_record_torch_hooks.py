"""What `cgtool record` takes from torch, against the torch installed here (CI: the CPU build of
torch 2.13; the GPU machine: torch 2.11), so that a torch release that renames one of them fails
here rather than leaving recordings without their names:

* torch.compile's "skipping cudagraphs due to ..." messages, through the logger the recorder listens to;
* the names of open ``torch.profiler.record_function`` ranges (the recorder wraps the class);
* the autograd node a backward pass is running (``torch._C._current_autograd_node``);
* the ``torch.cuda.graph`` context manager holding its ``CUDAGraph`` as ``self.cuda_graph`` (the
  pool of a graph is read from it) and the ``CUDAGraph.pool()`` method.
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
    assert [s["reason"] for s in rec.skips] == ["skipping cudagraphs due to mutated inputs (test)"]
    assert rec.skips[0]["site"]["file"] == __file__  # the line that was being compiled: this test's


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
