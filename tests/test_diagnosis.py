"""Capture-failure classification, on the error texts recorded on the GPU machine
(tests/data/broken/diagnoses.json, made by scripts/record_broken.py from sample_workloads/broken)."""

import json

import pytest

from cgtool.capture.diagnosis import CUDA_CAPTURE_ERRORS, Diagnosis, FailureCode, classify, cuda_error_in

# What each broken workload does wrong, from its own docstring: independent of the classifier.
EXPECTED = {
    "host_sync_item": FailureCode.HOST_SYNC,
    "host_sync_nonzero": FailureCode.HOST_SYNC,
    "host_sync_synchronize": FailureCode.HOST_SYNC,
    "default_stream": FailureCode.DEFAULT_STREAM,
    "unjoined_stream": FailureCode.UNJOINED_STREAM,
    "other_thread": FailureCode.OTHER_THREAD,
    "alloc_cudamalloc": FailureCode.ALLOC_NOT_PERMITTED,
    "rng_generator": FailureCode.RNG_UNREGISTERED,
    "out_of_memory": FailureCode.OUT_OF_MEMORY,
    "empty_graph": FailureCode.EMPTY_GRAPH,
    "stale_scalar": FailureCode.REPLAY_MISMATCH,
}


@pytest.fixture
def recorded(data_dir):
    return json.loads((data_dir / "broken" / "diagnoses.json").read_text())


def test_every_failure_class_was_recorded(recorded):
    assert set(EXPECTED) <= set(recorded)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_recorded_run_got_the_right_code_line_and_exit_code(recorded, case):
    r = recorded[case]
    assert r["exit_code"] == 3
    d = r["diagnosis"]
    assert d["code"] == EXPECTED[case].value
    assert f"broken/{case}.py:" in d["where"]  # points at the user's file and a line
    assert f"[{d['code']}]" in r["stderr"] and "Fix:" in r["stderr"] and "Traceback" not in r["stderr"]


@pytest.mark.parametrize("case", sorted(c for c in EXPECTED if EXPECTED[c] not in (
    FailureCode.EMPTY_GRAPH, FailureCode.REPLAY_MISMATCH, FailureCode.DEFAULT_STREAM)))
def test_classifier_reproduces_the_code_from_the_recorded_evidence(recorded, case):
    d = recorded[case]["diagnosis"]
    code = classify(d["error_full"], exc_type=d["exc_type"], user_line=d["user_line"], frames=d["frames"],
                    sync_sites=d["sync_sites"], other_threads=d["other_threads"])
    assert code is EXPECTED[case]


def test_host_sync_names_the_warm_up_sync_site(recorded):
    d = recorded["host_sync_item"]["diagnosis"]
    assert any(".item()" in s for s in d["sync_sites"])


@pytest.mark.parametrize("num", sorted(CUDA_CAPTURE_ERRORS))
def test_cuda_capture_errors_are_named(num):
    name, msg = CUDA_CAPTURE_ERRORS[num]
    assert cuda_error_in(f"CUDA error: {msg}") == (num, name)
    assert cuda_error_in(f"failed: {name}") == (num, name)
    code = classify(f"CUDA error: {msg}")
    assert code is not FailureCode.UNKNOWN


def test_error_texts_seen_elsewhere():
    assert classify("CUDA error: operation not permitted when stream is capturing",
                    user_line="buf = torch.cuda.caching_allocator_alloc(n); x.pin_memory()") is FailureCode.ALLOC_NOT_PERMITTED
    assert classify("CUDA error: capturing stream has unjoined work") is FailureCode.UNJOINED_STREAM
    assert classify("CUDA error: operation would make the legacy stream depend on a capturing blocking stream",
                    user_line="with torch.cuda.stream(torch.cuda.default_stream()):") is FailureCode.DEFAULT_STREAM
    assert classify("CUDA error: operation failed due to a previous error during capture") is FailureCode.CAPTURE_INVALIDATED
    assert classify("CUDA error: operation failed due to a previous error during capture",
                    other_threads=2) is FailureCode.OTHER_THREAD
    assert classify("torch.OutOfMemoryError: CUDA out of memory.") is FailureCode.OUT_OF_MEMORY
    assert classify("KeyError: 'x'", during_capture=False) is FailureCode.WORKLOAD_ERROR
    assert classify("something new") is FailureCode.UNKNOWN


def test_paragraph_has_code_where_and_fix():
    d = Diagnosis(FailureCode.UNJOINED_STREAM, "w.py:9 (def step)", cuda_error="cudaErrorStreamCaptureUnjoined (904)")
    text = d.paragraph("w.py")
    assert text.startswith("Capture of w.py failed") and "[unjoined-stream]" in text and "w.py:9" in text
    assert "904" in text and "Fix:" in text and "wait_stream" in text
    assert d.to_json()["remedy"] == d.remedy
