"""Graphs that read memory their program freed: the findings of ``cgtool record``'s input checks.

The recorder (``capture/record/inputs.py``) lists per graph the allocator blocks outside any graph
pool that its kernels, copies and memsets use (its *external* blocks), and for each block that was
freed and then replayed over: where it was allocated, where it was freed, which allocation took its
memory, and the replays concerned. This module turns those entries (``artifacts/recording.py``'s
:class:`~cgtool.artifacts.recording.GraphInputs`) into findings and sentences, from the files alone.

A sentence reads: "graph #2 (serve.py:88) reads `x` (4×4096 fp16, allocated at serve.py:61); `x` was
freed at serve.py:95 before replay 3 and its memory reused by `logits` (allocated at serve.py:97) —
replays 3–40 read `logits`' data". A tensor's name is the capturing code's local that held it, else
the assignment on the line that allocated it (``logits = torch.zeros(...)``), else its size.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cgtool.artifacts.recording import (
    INPUT_FINDING_KINDS,
    GraphEntry,
    GraphInputs,
    InputFinding,
    InputSite,
)


@dataclass(frozen=True)
class StaleInput:
    """One graph reading memory its program freed (one external block)."""

    pid: int | None
    seq: int
    graph_label: str
    graph_site: str | None  # "file:line" where its capture began
    finding: InputFinding

    @property
    def replays(self) -> int:
        """How many replays read the freed memory for sure."""
        f = self.finding
        return max(0, f.last_replay - f.first_replay + 1)

    def to_json(self) -> dict[str, Any]:
        f, b = self.finding, self.finding.input
        reused = f.reused_by
        return {"pid": self.pid, "graph": self.seq, "graph_label": self.graph_label, "captured_at": self.graph_site,
                "kind": f.kind, "input": _name(b.name, b.allocated_at, b.bytes), "shape": b.shape,
                "dtype": b.dtype, "bytes": b.bytes,
                "allocated_at": _site_json(b.allocated_at), "freed_at": _site_json(f.freed_at),
                "reused_by": None if reused is None else {
                    "name": _name(None, reused.allocated_at, reused.bytes), "bytes": reused.bytes,
                    "allocated_at": _site_json(reused.allocated_at)},
                "first_replay": f.first_replay, "first_replay_exact": f.first_replay_exact,
                "may_start_at": _may(f), "last_replay": f.last_replay, "replays": self.replays,
                "reallocs": f.reallocs if f.kind == "stale" else None,
                "unchanged_between": [list(x) for x in f.unchanged_between] if f.kind == "stale" else None,
                "sentence": sentence(self)}


def _may(f: InputFinding) -> int:
    return f.may_start_at if f.may_start_at is not None else f.first_replay


def _site_json(s: InputSite | None) -> dict[str, Any] | None:
    return None if s is None else {"file": s.file, "line": s.line, "function": s.function, "code": s.code}


_ASSIGN = re.compile(r"^\s*([A-Za-z_][\w.]*(?:\[[^\]]*\])?)\s*(?::[^=]+)?=(?!=)")


def _assigned(code: str | None) -> str | None:
    """``logits`` of ``logits = torch.zeros(...)``; None when the line assigns nothing (or several)."""
    if not code:
        return None
    m = _ASSIGN.match(code)
    if m is None or "," in m.group(1):
        return None
    return m.group(1)


def _name(name: str | None, site: InputSite | None, nbytes: int | None) -> str:
    if name:
        return name
    got = _assigned(site.code if site is not None else None)
    if got and not (site is not None and site.code and site.code.lstrip().startswith("return")):
        return got
    return f"a {_bytes(nbytes)} tensor" if nbytes is not None else "a tensor"


def _bytes(n: int | None) -> str:
    if n is None:
        return "? B"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} B"


def _at(s: InputSite | None) -> str:
    return "?" if s is None else f"{os.path.basename(s.file)}:{s.line}"


def _shape(f: InputFinding) -> str:
    b = f.input
    if b.shape is not None:
        dims = "×".join(str(d) for d in b.shape) or "scalar"
        return f"{dims} {b.dtype}" if b.dtype else dims
    return _bytes(b.bytes)


def _code(name: str) -> str:
    return name if name.startswith("a ") else f"`{name}`"


def sentence(s: StaleInput) -> str:
    """The finding as the summary says it."""
    f = s.finding
    where = _where(s.graph_site)
    alloc = f.input.allocated_at
    name = _name(f.input.name, alloc, f.input.bytes)
    if f.kind == "stale":
        pairs = ", ".join(f"{x[0]}–{x[1]}" for x in f.unchanged_between[:3] if len(x) == 2) + (
            " ..." if len(f.unchanged_between) > 3 else "")
        return (f"graph #{s.seq} ({where}) reads {_code(name)} ({_shape(f)}, allocated at {_at(alloc)}), "
                f"which nothing writes between replays (checked between replays {pairs}), while "
                f"{_at(alloc)} made {f.reallocs} new tensor(s) of its size after the capture — "
                f"replays {f.first_replay}–{f.last_replay} read the old data (was the input rebound instead of "
                f"updated in place, `{name if not name.startswith('a ') else 'x'}.copy_(new)`?)")
    head = (f"graph #{s.seq} ({where}) reads {_code(name)} ({_shape(f)}, allocated at {_at(alloc)}); "
            f"{_code(name) if not name.startswith('a ') else 'it'} was freed"
            + (f" at {_at(f.freed_at)}" if f.freed_at is not None else
               " (where: not known, the allocator's history had overflowed)" if not f.freed_site_known else "")
            + f" before replay {f.first_replay}")
    if not f.first_replay_exact and _may(f) < f.first_replay:
        head += f" (or as early as replay {_may(f)}: no check ran in between)"
    rng = f"replay {f.first_replay}" if f.first_replay == f.last_replay else f"replays {f.first_replay}–{f.last_replay}"
    if f.kind == "reused" and f.reused_by is not None:
        other = _name(None, f.reused_by.allocated_at, f.reused_by.bytes)
        owner = "that tensor's" if other.startswith("a ") else f"`{other}`'" + ("" if other.endswith("s") else "s")
        return (head + f" and its memory reused by {_code(other)} (allocated at {_at(f.reused_by.allocated_at)}) — "
                f"{rng} read {owner} data")
    return head + f" — {rng} read freed memory (no tensor took it yet)"


def _where(site: str | None) -> str:
    if not site:
        return "?"
    path, _, line = site.rpartition(":")
    return f"{os.path.basename(path)}:{line}"


def stale_inputs(pid: int | None, graphs: Sequence[GraphEntry]) -> list[StaleInput]:
    """The findings of one process's graph entries (its index's ``graphs``)."""
    out = []
    for g in graphs:
        if g.inputs is None:
            continue
        for f in g.inputs.findings:
            if f.kind in INPUT_FINDING_KINDS:
                out.append(StaleInput(pid, g.seq, g.label, g.captured_at, f))
    return out


@dataclass(frozen=True)
class InputsCoverage:
    """What the checks covered in one process: graphs checked and not, and why not."""

    checked: int
    not_checked: dict[str, int]  # reason -> graphs
    partial: int = 0  # checked graphs whose kernel parameters were not all read (the scan's time bound)


def coverage(graphs: Sequence[GraphEntry]) -> InputsCoverage | None:
    entries: list[GraphInputs] = [g.inputs for g in graphs if g.inputs is not None]
    if not entries:
        return None
    why: dict[str, int] = {}
    for e in entries:
        if not e.checked:
            why[e.why_not or "unknown"] = why.get(e.why_not or "unknown", 0) + 1
    return InputsCoverage(sum(1 for e in entries if e.checked), why,
                          sum(1 for e in entries if e.checked and e.scan_complete is False))


def checked_sentence(n_graphs: int, cov: InputsCoverage, n_findings: int) -> str | None:
    """One line on what was checked, said when nothing was found (so silence is not mistaken for a pass)."""
    if n_findings:
        return None
    if cov.checked == 0:
        why = "; ".join(f"{n}x {w}" for w, n in sorted(cov.not_checked.items(), key=lambda x: -x[1])[:3])
        return f"Graph inputs were not checked ({why})." if why else None
    rest = sum(cov.not_checked.values())
    return (f"No graph read memory its program had freed ({cov.checked} of {n_graphs} graph(s) checked"
            + (f", {cov.partial} of them on part of their kernels (the scan's time bound)" if cov.partial else "")
            + ("; not checked: " + "; ".join(f"{n}x {w}" for w, n in cov.not_checked.items()) if rest else "")
            + ").")


__all__ = ["InputsCoverage", "StaleInput", "checked_sentence", "coverage", "sentence", "stale_inputs"]
