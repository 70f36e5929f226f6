"""The summary `cgtool record` prints at the end of a run: one row per graph, then memory and coverage."""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console
from rich.table import Table

from cgtool.artifacts.recording import Recording


def _ms(v: Any) -> str:
    return "-" if v is None else f"{float(v) * 1e3:.2f}"


def _mib(v: Any) -> str:
    return "-" if v is None else f"{int(v) / 2**20:.1f}"


def _where(v: Any) -> str:
    if not v:
        return "-"
    path, _, line = str(v).rpartition(":")
    return f"{os.path.basename(path)}:{line}"


def record_summary(con: Console, recs: list[Recording]) -> None:
    for r in recs:
        idx = r.index
        title = f"cgtool record: {len(r.graphs)} graph(s) in {r.folder}" + (
            f" (rank {r.rank})" if r.rank is not None else "")
        if not r.graphs:
            con.print(f"{title}\nThe program instantiated no CUDA graph "
                      f"(exit code {idx.get('exit_code')}).", markup=False, highlight=False)
            continue
        tab = Table(title=title, title_justify="left")
        for col, j in (("graph", "left"), ("exec", "right"), ("nodes", "right"), ("replays", "right"),
                       ("cap/inst ms", "right"), ("pool", "left"), ("+MiB", "right"), ("captured at", "left")):
            tab.add_column(col, justify=j, no_wrap=col != "captured at",  # type: ignore[arg-type]
                           overflow="fold" if col == "captured at" else "ellipsis")
        for g in r.graphs:
            tab.add_row(str(g["label"]).split(" ")[0], str(g["exec_graph_id"]), str(g["nodes"]), str(g["replays"]),
                        f"{_ms(g.get('capture_s'))}/{_ms(g.get('instantiate_s'))}", str(g.get("pool") or "-"),
                        _mib(g.get("reserved_during_capture")), _where(g.get("captured_at")))
        con.print(tab)
        led = idx.get("ledger") or {}
        if led.get("pools"):
            parts = [f"pool {p['pool']}: {_mib(p['bytes_reserved'])} MiB, graphs {p['graphs']}" for p in led["pools"]]
            con.print("memory: " + "; ".join(parts) + f". Held by graph pools {_mib(led.get('bytes_held_by_graph_pools'))}"
                      f" MiB of a {_mib(led.get('peak_bytes_reserved'))} MiB peak reserved.", markup=False,
                      highlight=False)
        comp = idx.get("compile") or {}
        skips = comp.get("cudagraph_skips") or []
        if comp.get("graphs_from_compiled_code") or skips:
            con.print(f"torch.compile: {len(comp.get('graphs_from_compiled_code') or [])} graph(s) from compiled "
                      f"code; {len(skips)} cudagraph skip(s)" + "".join(
                          f"\n  {_first_line(s['reason'])} ({_where_site(s['site'])})" for s in skips[:10]),
                      markup=False, highlight=False)
        cov = idx.get("coverage") or {}
        if cov.get("share_in_graphs") is not None:
            con.print(f"coverage: {100 * float(cov['share_in_graphs']):.1f}% of the run's GPU kernel time was inside "
                      f"graph replays ({int(cov.get('kernels_in_graphs') or 0)} kernels in graphs, "
                      f"{int(cov.get('kernels_outside_graphs') or 0)} outside; "
                      f"{_ms(int(cov.get('kernel_ns_in_graphs') or 0) / 1e9)} ms vs "
                      f"{_ms(int(cov.get('kernel_ns_outside_graphs') or 0) / 1e9)} ms)"
                      + (f"; {100 * float(cov['share_in_graphs_since_first_graph']):.1f}% from the first graph on "
                         f"({int(cov.get('kernels_outside_graphs_since_first_graph') or 0)} kernels outside)"
                         if cov.get("share_in_graphs_since_first_graph") is not None else "") + ".",
                      markup=False, highlight=False)
        elif "coverage" in idx and cov:
            con.print("coverage: no kernel ran.", markup=False, highlight=False)
        if idx.get("trace"):
            con.print(f"trace: {r.folder / idx['trace']}", markup=False, highlight=False)
        if idx.get("recorder_errors"):
            con.print(f"recorder errors: {idx['recorder_errors'][:3]}", markup=False, highlight=False)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0].split(". Found from")[0].rstrip(" :.") if text.strip() else text


def _where_site(site: dict[str, Any]) -> str:
    return _where(f"{site.get('file')}:{site.get('line')}") if site.get("file") else "?"
