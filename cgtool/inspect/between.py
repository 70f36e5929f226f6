"""What ran on a lane between the two items of a serialization.

A hardware channel runs several items at once, so "B started after A ended, nothing starting
between them" does not mean B started when A ended: other items that started before A's end may
still have been running through the gap, and B started when one of them made room. This module
names them, from the replay's events, so that a reader is not told "#11 waited behind #3" alone
when #5, #7 and #9 were running until #11 started.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from cgtool.artifacts.graph import GraphData
from cgtool.inspect.results import DepsResult, Finding

LOW32 = 0xFFFFFFFF


def ran_between(r: DepsResult, graphs: Sequence[GraphData], f: Finding) -> list[int] | None:
    """The node ids (``#n``) of the items that were running on the lane of ``f`` between the end of
    ``f.before`` and the start of ``f.after``, in the first replay that shows the pair; None when
    the result holds no events (nothing to tell)."""
    m = r.events
    g = next((x for x in graphs if x.exec_graph_id == f.graph_id), None)
    if m is None or g is None or not len(m.start) or not len(m.replay):
        return None
    index = {n.tools_id: n.index for n in g.nodes}
    if f.before not in index or f.after not in index:
        return None
    # Each full pass over the events counts at 10^6 of them: the node's events first, then their graph.
    a = np.flatnonzero(m.node == index[f.before])
    a = a[m.graph[a] == f.graph_id]
    b = np.flatnonzero(m.node == index[f.after])
    b = b[m.graph[b] == f.graph_id]
    for j in b:
        same = a[(m.replay[a] == m.replay[j]) & (m.lane_id[a] == m.lane_id[j])]
        if not len(same):
            continue
        i = same[0]
        a_end, b_start = m.end[i], m.start[j]
        if b_start < a_end - r.tolerance_us:
            continue
        rows = np.flatnonzero(m.replay == m.replay[j])  # the replay's events: the rest is tested on them alone
        run = rows[(m.graph[rows] == f.graph_id) & (m.lane_id[rows] == m.lane_id[j]) & (m.start[rows] < b_start)
                   & (m.end[rows] > a_end)]
        run = run[(run != i) & (run != j)]
        tools = [g.nodes[int(k)].tools_id & LOW32 for k in m.node[run]]
        return sorted(tools)
    return None


__all__ = ["ran_between"]
