"""Why a capture failed: stable codes, each with a remedy, classified from the error text and
where it happened. Pure: the capture side gathers the evidence, this module judges it (and the
CPU tests exercise it with error texts recorded on the GPU machine)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Sequence


class FailureCode(str, Enum):
    """Stable codes of capture failures (shown to users, kept in JSON results)."""

    HOST_SYNC = "host-sync"  # the step synchronized with the host during capture (.item(), .cpu(), ...)
    DEFAULT_STREAM = "default-stream"  # work went to the legacy default stream while capturing
    UNJOINED_STREAM = "unjoined-stream"  # a side stream forked from the capture was never joined back
    OTHER_THREAD = "other-thread"  # another thread used CUDA while this one captured (global mode)
    ALLOC_NOT_PERMITTED = "alloc-not-permitted"  # an allocation the capture mode forbids (pinned host memory, ...)
    RNG_UNREGISTERED = "rng-unregistered"  # a CUDA generator used in the graph was not registered with it
    OUT_OF_MEMORY = "out-of-memory"  # the GPU ran out of memory during capture
    CAPTURE_INVALIDATED = "capture-invalidated"  # an earlier error broke the capture (CUDA error 901)
    CUDA_CAPTURE_ERROR = "cuda-capture-error"  # another stream-capture error (CUDA errors 900-908)
    EMPTY_GRAPH = "empty-graph"  # the step issued no CUDA work
    REPLAY_MISMATCH = "replay-mismatch"  # the graph ran, but its outputs differ from eager
    WORKLOAD_ERROR = "workload-error"  # the step raised an error of its own
    UNKNOWN = "unknown"  # none of the above


#: CUDA's stream-capture errors, by number: (name, the runtime's message).
CUDA_CAPTURE_ERRORS: dict[int, tuple[str, str]] = {
    900: ("cudaErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing"),
    901: ("cudaErrorStreamCaptureInvalidated", "operation failed due to a previous error during capture"),
    902: ("cudaErrorStreamCaptureMerge", "operation would result in a merge of separate capture sequences"),
    903: ("cudaErrorStreamCaptureUnmatched", "capture was not ended in the same stream as it began"),
    904: ("cudaErrorStreamCaptureUnjoined", "capturing stream has unjoined work"),
    905: ("cudaErrorStreamCaptureIsolation", "dependency created on uncaptured work in another stream"),
    906: ("cudaErrorStreamCaptureImplicit", "operation would make the legacy stream depend on a capturing blocking stream"),
    907: ("cudaErrorCapturedEvent", "operation not permitted on an event last recorded in a capturing stream"),
    908: ("cudaErrorStreamCaptureWrongThread", "attempt to terminate a thread-local capture sequence from another thread"),
}

REMEDY: dict[FailureCode, str] = {
    FailureCode.HOST_SYNC: (
        "Nothing in the captured step may wait for the GPU: move .item(), .cpu(), .tolist(), print() of CUDA "
        "tensors, torch.cuda.synchronize() and data-dependent shapes (nonzero, masked_select, unique, boolean "
        "indexing) out of the step, or keep the values on the GPU (torch.where instead of an if on a tensor)."
    ),
    FailureCode.DEFAULT_STREAM: (
        "Capture runs on a side stream; work sent to torch.cuda.default_stream() (or any stream not forked "
        "from the capture) is not captured: it runs once, eagerly, and the graph misses it. Use the current "
        "stream, or side streams forked with wait_stream and joined back."
    ),
    FailureCode.UNJOINED_STREAM: (
        "Every side stream that waits on the capture stream must be joined back before capture ends: "
        "after the side work, call torch.cuda.current_stream().wait_stream(side)."
    ),
    FailureCode.OTHER_THREAD: (
        "Another thread used CUDA while this one was capturing. Keep other threads off CUDA during capture, "
        "or capture with capture_error_mode='thread_local' (errors only for this thread) or 'relaxed'."
    ),
    FailureCode.ALLOC_NOT_PERMITTED: (
        "The step allocates memory that cannot be allocated during capture (pinned host memory, "
        "cudaMalloc outside PyTorch's graph pool, empty_cache). Allocate it once before capture and reuse it, "
        "or capture with capture_error_mode='relaxed' if the allocation is safe."
    ),
    FailureCode.RNG_UNREGISTERED: (
        "Register every CUDA generator the step uses with the graph before capture "
        "(graph.register_generator_state(gen) on torch >= 2.6), or use the default generator."
    ),
    FailureCode.OUT_OF_MEMORY: (
        "The capture needs more GPU memory than is free: reduce the batch or model size, free tensors before "
        "capture, or share a memory pool between graphs (pool=other_graph.pool())."
    ),
    FailureCode.CAPTURE_INVALIDATED: (
        "An earlier operation in the step broke the capture; the first error printed by CUDA/PyTorch "
        "(run with CUDA_LAUNCH_BLOCKING=1 to see it in place) is the one to fix."
    ),
    FailureCode.CUDA_CAPTURE_ERROR: (
        "The step did something stream capture does not allow (see the CUDA error); capture only kernel "
        "launches, copies and event work on streams forked from the capture stream."
    ),
    FailureCode.EMPTY_GRAPH: (
        "The step issued no CUDA work, so there is nothing to replay: check that its tensors are on the GPU "
        "and that setup() returns the step itself, not its result."
    ),
    FailureCode.REPLAY_MISMATCH: (
        "A value read on the host during capture is baked into the graph (a Python number or a CPU tensor "
        "that changes between calls), inputs were reallocated between capture and replay, or the step is not "
        "idempotent. Keep changing values in GPU tensors that the step reads, and reuse input buffers "
        "(copy_ new data into them)."
    ),
    FailureCode.WORKLOAD_ERROR: "Fix the error in the step; it also fails outside a graph.",
    FailureCode.UNKNOWN: "Run with CGTOOL_DEBUG=1 for the traceback, and CUDA_LAUNCH_BLOCKING=1 to locate the failing call.",
}

TITLE: dict[FailureCode, str] = {
    FailureCode.HOST_SYNC: "a host synchronization during capture",
    FailureCode.DEFAULT_STREAM: "work on the default stream during capture",
    FailureCode.UNJOINED_STREAM: "a side stream was not joined back into the capture",
    FailureCode.OTHER_THREAD: "CUDA work from another thread during capture",
    FailureCode.ALLOC_NOT_PERMITTED: "an allocation not permitted during capture",
    FailureCode.RNG_UNREGISTERED: "a random generator not registered with the graph",
    FailureCode.OUT_OF_MEMORY: "out of GPU memory during capture",
    FailureCode.CAPTURE_INVALIDATED: "the capture was invalidated by an earlier error",
    FailureCode.CUDA_CAPTURE_ERROR: "a CUDA stream-capture error",
    FailureCode.EMPTY_GRAPH: "the captured graph is empty",
    FailureCode.REPLAY_MISMATCH: "replay differs from eager",
    FailureCode.WORKLOAD_ERROR: "the step raised an error",
    FailureCode.UNKNOWN: "an unrecognised capture failure",
}

_SYNC_WORDS = re.compile(r"\.item\(|\.cpu\(|\.tolist\(|\.numpy\(|print\(|synchronize\(|\.nonzero\(|nonzero\(|"
                         r"masked_select|\.unique\(|torch\.unique|\bbool\(|\bint\(|\bfloat\(|if .*\bany\(|\.any\(\)|"
                         r"\.all\(\)|repeat_interleave|\.to\(['\"]cpu")
_ALLOC_WORDS = re.compile(r"pin_memory|empty_cache|cudaMalloc|cudaHostAlloc|caching_allocator_alloc|host_alloc|"
                          r"\.pin_memory\(")
_RNG_WORDS = re.compile(r"[Gg]enerator|philox|seed", re.I)


@dataclass
class Diagnosis:
    """What failed, where in the user's code, and what to do."""

    code: FailureCode
    where: str = ""  # "file:line (source)" in the user's code, when known
    error: str = ""  # the original error text (first line)
    cuda_error: str = ""  # e.g. "cudaErrorStreamCaptureUnjoined (904)"
    sync_sites: list[str] = field(default_factory=list)  # synchronizing calls seen during warm-up
    detail: str = ""  # extra words (e.g. the tensor that differs)
    # The evidence the code was decided on (kept so a diagnosis can be re-judged and tested).
    exc_type: str = ""
    other_threads: int = 0
    error_full: str = ""
    user_line: str = ""
    frames: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        return TITLE[self.code]

    @property
    def remedy(self) -> str:
        return REMEDY[self.code]

    def paragraph(self, target: str = "") -> str:
        parts = [f"Capture of {target} failed: {self.title} [{self.code.value}]" if target
                 else f"Capture failed: {self.title} [{self.code.value}]"]
        if self.where:
            parts.append(f"at {self.where}")
        text = " ".join(parts) + "."
        if self.cuda_error:
            text += f" CUDA reported {self.cuda_error}."
        elif self.error:
            text += f" The error was: {self.error}"
            text += "" if text.endswith(".") else "."
        if self.detail:
            text += f" {self.detail}"
        if self.sync_sites and self.code is FailureCode.HOST_SYNC:
            text += " Synchronizing calls seen during warm-up: " + ", ".join(self.sync_sites[:4]) + "."
        return f"{text} Fix: {self.remedy}"

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["code"] = self.code.value
        d["title"] = self.title
        d["remedy"] = self.remedy
        return d


def cuda_error_in(text: str) -> tuple[int, str] | None:
    """The CUDA capture error (number, name) a message names, by name, number or message."""
    for num, (name, msg) in CUDA_CAPTURE_ERRORS.items():
        if name in text or msg in text or re.search(rf"\berror(?: code)?:? ?{num}\b", text):
            return num, name
    return None


def classify(error_text: str, *, exc_type: str = "", user_line: str = "", frames: Sequence[str] = (),
             sync_sites: Sequence[str] = (), during_capture: bool = True, other_threads: int = 0) -> FailureCode:
    """The failure code for an error raised while capturing.

    ``user_line``: the source line of the user's innermost frame; ``frames``: file names of the
    traceback (to see threads); ``sync_sites``: user lines that synchronized during warm-up;
    ``other_threads``: Python threads alive besides the capturing one when it failed.
    """
    text = error_text
    low = text.lower()
    if "out of memory" in low or exc_type.endswith("OutOfMemoryError"):
        return FailureCode.OUT_OF_MEMORY
    if "graph is empty" in low:
        return FailureCode.EMPTY_GRAPH
    if "default (legacy) stream" in low or "non-default stream" in low:
        return FailureCode.DEFAULT_STREAM
    if ("generator" in low and ("graph" in low or "captur" in low)) or "register_generator_state" in low:
        return FailureCode.RNG_UNREGISTERED
    err = cuda_error_in(text)
    num = err[0] if err else None
    threaded = any("threading.py" in f for f in frames) or (other_threads > 0 and not _SYNC_WORDS.search(user_line))
    if num == 904:
        return FailureCode.UNJOINED_STREAM
    if num in (906,) and "default_stream" in user_line.replace(" ", "").lower():
        return FailureCode.DEFAULT_STREAM
    if num in (905, 908) or (threaded and num in (900, 901, 906)):
        return FailureCode.OTHER_THREAD
    if num == 906:
        return FailureCode.DEFAULT_STREAM
    if num == 900 or "operation not permitted when stream is capturing" in low:
        if _ALLOC_WORDS.search(user_line):
            return FailureCode.ALLOC_NOT_PERMITTED
        if _RNG_WORDS.search(user_line) and "generator" in user_line.lower():
            return FailureCode.RNG_UNREGISTERED
        return FailureCode.HOST_SYNC
    if "synchronize" in low and "captur" in low:
        return FailureCode.HOST_SYNC
    if num == 901:
        return FailureCode.CAPTURE_INVALIDATED
    if num is not None:
        return FailureCode.CUDA_CAPTURE_ERROR
    if "captur" in low and ("not allowed" in low or "not permitted" in low or "unsupported" in low):
        return FailureCode.HOST_SYNC if _SYNC_WORDS.search(user_line) else FailureCode.CUDA_CAPTURE_ERROR
    if not during_capture:
        return FailureCode.WORKLOAD_ERROR
    return FailureCode.UNKNOWN


def describe_cuda_error(text: str) -> str:
    err = cuda_error_in(text)
    return f"{err[1]} ({err[0]})" if err else ""
