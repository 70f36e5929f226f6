"""The summary `cgtool record` prints at the end of a run: the processes, each one's graphs by
capture site, memory and coverage, then the findings (``inspect/record_summary.py``)."""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console
from rich.table import Table

from cgtool.artifacts.recording import Recording, RecordingTree, SourceSite
from cgtool.inspect.record_summary import ProcessSummary, RecordSummary, cannot_make_graphs, idle_kinds, summarize


def _ms(v: Any) -> str:
    return "-" if v is None else f"{float(v) * 1e3:.2f}"


def _mib(v: Any) -> str:
    return "-" if v is None else f"{int(v) / 2**20:.1f}"


def _where(v: Any) -> str:
    if not v:
        return "-"
    path, _, line = str(v).rpartition(":")
    return f"{os.path.basename(path)}:{line}"


_MP = (("multiprocessing.spawn", "multiprocessing spawn"), ("multiprocessing.forkserver", "multiprocessing forkserver"),
       ("multiprocessing.resource_tracker", "multiprocessing resource tracker"))


def _argv(argv: list[str], width: int = 48) -> str:
    """A process's command line, short: multiprocessing's helpers by what they are."""
    if len(argv) >= 3 and argv[1:3] != [] and "-c" in argv[:4]:
        code = argv[argv.index("-c") + 1] if argv.index("-c") + 1 < len(argv) else ""
        for mod, what in _MP:
            if mod in code:
                return f"{os.path.basename(argv[0])} ({what})"
    text = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv)) or "?"
    return text if len(text) <= width else text[: width - 1] + "…"


def _print(con: Console, text: str) -> None:
    con.print(text, markup=False, highlight=False, soft_wrap=True)


def record_summary(con: Console, recs: RecordingTree | list[Recording]) -> None:
    """Print the summary of a whole recording (or, for older callers, of a list of process recordings)."""
    if isinstance(recs, list):
        from cgtool.artifacts.recording import from_recordings

        folder = recs[0].folder if recs else None
        tree = from_recordings(folder, recs) if folder is not None else None
        if tree is None:
            return
    else:
        tree = recs
    s = summarize(tree)
    for f in s.findings:  # the answers first, then the tables they come from
        _print(con, f"• {f}")
    _processes(con, s)
    for p in s.processes:
        if p.followed and p.graphs:
            _graphs(con, p, p.recording)


def _processes(con: Console, s: RecordSummary) -> None:
    """The processes, one row each; helper commands (which make no CUDA graph) counted in the title
    and the findings, not listed (a torch.compile run starts dozens; the tree's index lists them)."""
    n_graphs = len(s.graphs)
    # helpers and processes that could not make a graph are counted (one line per kind in the
    # findings), not listed: a torch.compile run starts dozens; the tree's index lists them
    shown = [p for p in s.processes if (p.followed or not p.helper) and cannot_make_graphs(p) is None]
    helpers = sum(1 for p in s.processes if not p.followed and p.helper)
    idle = sum(idle_kinds(s).values())
    tab = Table(title=f"cgtool record: {n_graphs} graph(s) in {len(shown)} process(es)"
                      + (f", {idle} that could not make one" if idle else "")
                      + (f" and {helpers} helper command(s)" if helpers else "") + "; program exit code "
                      f"{s.exit_code if s.exit_code is not None else '-'}", title_justify="left")
    ranked = any(p.rank is not None for p in shown)
    cols = [("pid", "right"), ("parent", "right"), *([("rank", "right")] if ranked else []), ("recorded", "left"),
            ("graphs", "right"), ("replays", "right"), ("exit", "right"), ("command", "left")]
    pid_w = max([3, *(len(str(p.pid)) for p in shown), *(len(str(p.parent)) for p in shown)])
    for col, j in cols:  # the numbers keep their width; the command is cut to what is left
        tab.add_column(col, justify=j, no_wrap=True, overflow="ellipsis",  # type: ignore[arg-type]
                       min_width=(pid_w if col in ("pid", "parent") else len(col)) if col != "command" else 8)
    room = max(12, con.width - sum(max(len(c), pid_w) + 3 for c, _ in cols[:-1]) - 4)
    for p in shown:
        tab.add_row("?" if p.pid is None else str(p.pid), str(p.parent if p.parent is not None else "-"),
                    *(["-" if p.rank is None else str(p.rank)] if ranked else []),
                    ("yes" if not p.reason else "partly") if p.followed else "no",
                    str(len(p.graphs)) if p.followed else "?", str(p.replays) if p.followed else "?",
                    "-" if p.exit_code is None else str(p.exit_code), _argv(p.argv, min(48, room)))
    con.print(tab)


def _graphs(con: Console, p: ProcessSummary, rec: Recording | None) -> None:
    title = (f"process {p.pid if p.pid is not None else '?'}" + (f" (rank {p.rank})" if p.rank is not None else "")
             + f": {len(p.graphs)} graph(s)")
    tab = Table(title=title, title_justify="left")
    for col, j in (("graph", "left"), ("nodes", "right"), ("replays", "right"), ("cap/inst ms", "right"),
                   ("pool", "left"), ("captured at", "left")):
        tab.add_column(col, justify=j, no_wrap=col != "captured at",  # type: ignore[arg-type]
                       overflow="fold" if col == "captured at" else "ellipsis")
    for site in p.sites:
        for g in site.graphs:
            tab.add_row(g.label.split(" ")[0] or f"#{g.seq}", str(g.nodes),
                        str(g.replays) + ("" if g.replays_complete else "+"),
                        f"{_ms(g.capture_s)}/{_ms(g.instantiate_s)}", str(g.pool or "-"), _where(g.site))
    con.print(tab)
    if rec is None:
        return
    idx = rec.index
    led = idx.ledger
    if led is not None and led.pools:  # one figure per pool: what it held at exit (the graphs' captures are in it)
        parts = [f"pool {q.pool} (graphs {_seqs(list(q.graphs))}): {_mib(q.bytes_reserved)} MiB" for q in led.pools]
        _print(con, "memory at exit: " + "; ".join(parts) + f", of a {_mib(led.peak_bytes_reserved)} MiB "
               "peak reserved.")
    comp = idx.compile
    skips = comp.cudagraph_skips
    if comp.graphs_from_compiled_code or skips:
        _print(con, f"torch.compile: {len(comp.graphs_from_compiled_code)} graph(s) from compiled "
               f"code; {len(skips)} cudagraph skip(s)" + "".join(
                   f"\n  {_first_line(s.reason)} ({_where_site(s.site)})" for s in skips[:10]))
    cov = idx.coverage
    if cov is not None and cov.share_in_graphs is not None:
        _print(con, f"coverage: {100 * cov.share_in_graphs:.1f}% of the run's GPU kernel time was inside "
               f"graph replays ({cov.kernels_in_graphs} kernels in graphs, {cov.kernels_outside_graphs} outside; "
               f"{_ms(cov.kernel_ns_in_graphs / 1e9)} ms vs {_ms(cov.kernel_ns_outside_graphs / 1e9)} ms)"
               + (f"; {100 * cov.share_in_graphs_since_first_graph:.1f}% from the first graph on "
                  f"({cov.kernels_outside_graphs_since_first_graph} kernels outside)"
                  if cov.share_in_graphs_since_first_graph is not None else "") + ".")
    elif cov is not None:
        _print(con, "coverage: no kernel ran.")
    if idx.trace:
        _print(con, f"trace: {rec.folder / idx.trace}")
    if idx.recorder_errors:
        _print(con, f"recorder errors: {idx.recorder_errors[:3]}")


def _seqs(seqs: list[Any]) -> str:
    """``#0-#4`` for a run of graph numbers, else ``#0, #2``."""
    n = sorted(int(x) for x in seqs if isinstance(x, int))
    if len(n) > 2 and n == list(range(n[0], n[-1] + 1)):
        return f"#{n[0]}-#{n[-1]}"
    return ", ".join(f"#{x}" for x in n) or "-"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0].split(". Found from")[0].rstrip(" :.") if text.strip() else text


def _where_site(site: SourceSite | None) -> str:
    return _where(f"{site.file}:{site.line}") if site is not None and site.file else "?"
