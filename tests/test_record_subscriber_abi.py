"""The recorder's CUPTI constants and struct offsets (``_subscriber``) against cupti-python's own.

The recorder subscribes before the program starts without importing cupti-python, so it carries
CUPTI's callback ids and layouts itself; cupti-python (generated from CUPTI's headers) is the
independent source. Skipped where cupti-python is not installed (it runs on the GPU machine).
"""

from __future__ import annotations

import pytest

from cgtool.capture.record import _subscriber as S


@pytest.fixture(scope="module")
def cupti():  # type: ignore[no-untyped-def]
    pytest.importorskip("cupti")
    try:
        from cupti import cupti as c
    except Exception as e:  # a cupti-python that cannot load here
        pytest.skip(f"cupti-python does not load here: {e}")
    return c


def test_constants_and_layout_match_cupti_python(cupti) -> None:  # type: ignore[no-untyped-def]
    assert S.mismatches(cupti) == []
    assert S.DOMAIN_RESOURCE == int(cupti.CallbackDomain.RESOURCE)
    assert S.DOMAIN_RUNTIME == int(cupti.CallbackDomain.RUNTIME_API)
    assert S.DOMAIN_DRIVER == int(cupti.CallbackDomain.DRIVER_API)
    for name, v in S.RESOURCE.items():
        assert int(getattr(cupti.CallbackIdResource, name)) == v


@pytest.mark.parametrize("prefix", ["cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaGraphInstantiate",
                                    "cudaGraphLaunch"])
def test_runtime_ids_are_every_variant_cupti_python_knows(cupti, prefix: str) -> None:  # type: ignore[no-untyped-def]
    theirs = {int(v) for k, v in cupti.runtime_api_trace_cbid.__members__.items() if k.startswith(prefix)}
    assert S.runtime_ids(prefix) == theirs


def test_driver_launch_ids(cupti) -> None:  # type: ignore[no-untyped-def]
    theirs = {int(v) for k, v in cupti.driver_api_trace_cbid.__members__.items() if k.startswith("cuGraphLaunch")}
    assert set(S.DRIVER.values()) == theirs


def test_mismatches_reports_a_wrong_constant(cupti, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(S.RESOURCE, "GRAPHNODE_CREATED", 99)
    assert any("GRAPHNODE_CREATED" in m for m in S.mismatches(cupti))


@pytest.mark.gpu
def test_ctypes_ids_equal_cupti_pythons_on_a_real_graph(cupti) -> None:  # type: ignore[no-untyped-def]
    """The recorder's node ids (one C loop, or ctypes) are cupti-python's, node for node."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from cgtool.capture import _fastcuda

    x = torch.ones(64, device="cuda")
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(g):
        y = (x * 2).relu() + x.sin()
    raw = int(g.raw_cuda_graph())
    handles = list(_fastcuda.load().nodes(raw))
    assert len(handles) >= 3
    ids = S.Ids(S.load_libcupti())
    expected = [int(cupti.get_graph_node_id(h)) for h in handles]
    assert ids.graph_node_ids(handles).tolist() == expected
    assert [ids.get_graph_node_id(h) for h in handles] == expected
    assert ids.get_graph_id(raw) == int(cupti.get_graph_id(raw))
    del y, g
