"""What a picture of a graph folds, and how a node is labelled; shared by the DOT and HTML renderers.

Folding hides the inside of long linear runs, never their ends: the first and last node of every
maximal one-in/one-out run stay visible (they are where the run meets a fork, a join, a root or a
leaf), so the fork/join structure is always drawn. The inside of a run is cut into pieces of at
most ``max_fold`` nodes, so a straight-line graph of 300 nodes becomes a column of a dozen boxes,
not one box. A folded piece that holds critical-path nodes is drawn on the critical path.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

from cgtool.artifacts.graph import GraphData

#: Default folding: pieces of at least MIN_FOLD nodes are folded, none longer than MAX_FOLD.
MIN_FOLD = 4
MAX_FOLD = 24


def linear_runs(g: GraphData) -> list[list[int]]:
    """Maximal runs of nodes linked one-out to one-in (every node is in exactly one run)."""
    nodes = g.nodes

    def linked(a: int, b: int) -> bool:
        return len(nodes[a].dependents) == 1 and len(nodes[b].dependencies) == 1

    out: list[list[int]] = []
    for nd in nodes:
        i = nd.index
        if len(nd.dependencies) == 1 and linked(nd.dependencies[0], i):
            continue  # not the start of a run
        run = [i]
        while len(nodes[run[-1]].dependents) == 1 and linked(run[-1], nodes[run[-1]].dependents[0]):
            run.append(nodes[run[-1]].dependents[0])
        out.append(run)
    return out


@dataclass(frozen=True)
class Folding:
    """The folded pieces of a graph: each a list of node indices in order, at least two long."""

    pieces: list[list[int]]

    def piece_of(self) -> dict[int, int]:
        """Node index -> index of its piece in ``pieces`` (unfolded nodes are absent)."""
        return {i: k for k, p in enumerate(self.pieces) for i in p}


def fold(g: GraphData, min_fold: int = MIN_FOLD, max_fold: int = MAX_FOLD) -> Folding:
    """The pieces to fold: the inside of every linear run of more than ``min_fold + 1`` nodes, cut
    into near-equal pieces of at most ``max_fold`` nodes. ``min_fold`` 0 (or 1) folds nothing."""
    if min_fold <= 1:
        return Folding([])
    max_fold = max(max_fold, min_fold)
    pieces: list[list[int]] = []
    for run in linear_runs(g):
        inside = run[1:-1]
        if len(inside) < min_fold:
            continue
        k = math.ceil(len(inside) / max_fold)
        size = math.ceil(len(inside) / k)
        for s in range(0, len(inside), size):
            piece = inside[s:s + size]
            if len(piece) >= min_fold:
                pieces.append(piece)
    return Folding(pieces)


def source_of(extra: Mapping[str, Any]) -> str | None:
    """A node's source line from its cgtool extras (written by ``cgtool record``): ``source`` as a
    string, or ``file``/``line`` (at the top or inside ``source``); None when absent."""
    src: Any = extra.get("source")
    if isinstance(src, str) and src:
        return src
    d: Mapping[str, Any] = src if isinstance(src, dict) else extra
    f, line = d.get("file"), d.get("line")
    if isinstance(f, str) and f:
        return f"{f}:{line}" if isinstance(line, int) else f
    return None


def source_label(extra: Mapping[str, Any]) -> str | None:
    """The short form of a node's source for a label: ``record``'s own ``label`` (``model.py:22
    layer_norm``) when it has one, else ``model.py:22``; None when the export records no source."""
    src: Any = extra.get("source")
    if isinstance(src, dict) and isinstance(src.get("label"), str) and src["label"]:
        return str(src["label"])
    full = source_of(extra)
    return short_source(full) if full else None


def source_detail(extra: Mapping[str, Any]) -> str | None:
    """The long form, for a tooltip: ``path/model.py:22 in forward: h = self.norm(x)``."""
    full = source_of(extra)
    if full is None:
        return None
    src: Any = extra.get("source")
    if isinstance(src, dict):
        if isinstance(src.get("function"), str):
            full += f" in {src['function']}"
        if isinstance(src.get("code"), str) and src["code"]:
            full += f": {src['code']}"
    return full


def short_source(src: str) -> str:
    """``path/to/model.py:42`` -> ``model.py:42`` (the label; the full path goes in the tooltip)."""
    head, sep, tail = src.rpartition(":")
    if sep and tail.isdigit():
        return f"{os.path.basename(head)}:{tail}"
    return os.path.basename(src)


def node_source(g: GraphData, i: int) -> str | None:
    return source_of(g.node_extra(i))
