"""The NCCL table of ``cgtool deps`` on a per-rank trace set (``inspect/collectives.py``)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from cgtool.inspect.collectives import CollectiveFigures


def _f(v: Any, fmt: str) -> str:
    return "?" if v is None else format(v, fmt)


def collectives_table(figs: CollectiveFigures) -> Table:
    tab = Table(title="NCCL kernels in graph replays, per rank (means over the traced replays)", title_justify="left")
    for col in ("rank", "graph", "replays", "span µs", "NCCL µs", "NCCL share", "overlapped", "waited µs"):
        tab.add_column(col, justify="left" if col == "rank" else "right", no_wrap=True)
    for r, gs in figs.ranks.items():
        for g in gs:
            f = g.figures()
            tab.add_row(str(r), str(g.graph_id), str(f["replays"]), _f(f["span_us"], ".1f"), _f(f["nccl_us"], ".1f"),
                        _f(f["nccl_share"], ".1%"), _f(f["nccl_overlap"], ".1%"), _f(f["wait_us"], ".1f"))
    notes = []
    for s in figs.skew:
        if s.get("start_skew_us") is None:
            notes.append(f"replay start skew unknown: {s.get('reason')}")
        else:
            notes.append(f"replay start skew between ranks (relative to each rank's collective end): mean "
                         f"{_f(s.get('mean_start_skew_us'), '.1f')} µs, max {_f(s.get('max_start_skew_us'), '.1f')} µs")
    if notes:
        tab.caption = "; ".join(notes)
        tab.caption_justify = "left"
    return tab
