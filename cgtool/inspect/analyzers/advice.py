"""Notes and suggestions: advice only where the estimated saving is a meaningful share of the span."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from cgtool.artifacts.trace import Trace
from cgtool.inspect.analyzers._arrays import distinct
from cgtool.inspect import cost as costmod
from cgtool.inspect.results import DepKind, Finding, InferredWait, Lane
from cgtool.text import plural


@dataclass(frozen=True)
class Advice:
    """What ``deps.analyze`` adds to its result's notes, and its suggestions."""

    notes: tuple[str, ...]  # what the estimated saving says
    suggestions: tuple[str, ...]


def advise(findings: Sequence[Finding], waits: Sequence[InferredWait], cost: Mapping[str, Any], spans: np.ndarray,
           lane: Lane, trace: Trace) -> Advice:
    """Advice, only where the estimated saving (``cost``) is a meaningful share of the span (``spans``: per
    replay, as the result's replay table holds them)."""
    notes: list[str] = []
    out: list[str] = []
    n_fake = sum(f.count for f in findings if f.kind is DepKind.FAKE)
    if n_fake == 0 and not waits:
        return Advice((), ())
    c = cost
    share = c.get("saving_share")
    mean_span = float(spans.mean()) if len(spans) else 0.0
    basis = ("fake serializations" if lane is Lane.CHANNEL else
             "waits inferred from timing (if they were fake serializations)")
    if share is not None and share < costmod.MEANINGFUL_SHARE:
        why = (" The concurrent work already filled the GPU (the kernels' SM time is close to the span)."
               if c.get("gpu_filled") else "")
        notes.append(
            f"Re-scheduled without the {basis}, the replays would be an estimated "
            f"{c.get('saving_us', 0.0):.1f} µs shorter ({100 * share:.1f}% of the {mean_span:.1f} µs mean span): "
            f"the waits did not make the replays much longer, and no change is suggested.{why}")
        return Advice(tuple(notes), ())
    if share is not None:
        notes.append(f"Re-scheduled without the {basis}, the replays would be an estimated "
                     f"{c['saving_us']:.1f} µs shorter ({100 * share:.1f}% of the {mean_span:.1f} µs mean span).")
    env = (trace.cgtool or {}).get("CUDA_DEVICE_MAX_CONNECTIONS")
    chans = {ch for ch in distinct(trace.channel).tolist() if ch >= 0}
    if not chans and lane is Lane.CHANNEL:  # channels without channel data: one connection, channel 0
        chans = {0}
    try:
        limit = int(env) if env is not None else None
    except (TypeError, ValueError):  # a trace's metadata is input: a word here is not a limit
        limit = None
    if lane is Lane.CHANNEL:
        if limit is not None and chans and len(chans) <= limit:
            out.append(
                f"CUDA_DEVICE_MAX_CONNECTIONS={limit} limits the GPU to {plural(limit, 'hardware channel')} and "
                f"the trace used {len(chans)}: independent branches share a channel. Unset it or "
                "raise it to at least the graph's width (see `cgtool topo`), up to 32."
            )
        else:
            out.append(
                f"Independent work shared {plural(len(chans), 'hardware channel')}. Raising "
                "CUDA_DEVICE_MAX_CONNECTIONS (default 8, up to 32) gives the executor more channels."
            )
    elif n_fake:
        out.append(
            "Independent work ran one after another on the same stream. Capture independent "
            "branches on separate streams (fork with wait_stream) so the graph has no edge between them."
        )
    else:
        out.append(
            "Ready branches waited behind unrelated work (the trace has no channel data to say why). "
            "Check CUDA_DEVICE_MAX_CONNECTIONS (unset: 8 channels), or record with `cgtool trace` to see channels."
        )
    out.append(
        "If a fake dependency delays the critical path, issue critical-path work first or on a "
        "higher-priority stream (torch.cuda.Stream(priority=-1)) during capture."
    )
    return Advice(tuple(notes), tuple(out))


