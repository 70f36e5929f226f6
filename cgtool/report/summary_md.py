"""Markdown summaries of `deps` and `diff` for a CI job's page (``GITHUB_STEP_SUMMARY``), as
`bench` writes its table (``tables.bench_summary_md``), with a link to the HTML report when the
job publishes one (``CGTOOL_REPORT_URL``: its URL, or its path in the job's artifacts)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from cgtool.artifacts.names import short_name
from cgtool.inspect.results import DepsResult
from cgtool.report import words

if TYPE_CHECKING:  # diff (and networkx under it) is imported where a diff is rendered: `deps` needs neither
    from cgtool.inspect.diff import GraphDiff

#: Where `cgtool report`'s page of this job is published (a URL, or a path in the artifacts).
REPORT_URL_ENV = "CGTOOL_REPORT_URL"


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def report_link() -> str:
    url = os.environ.get(REPORT_URL_ENV, "").strip()
    return f"\nThe HTML report (graph, timeline, bench plots): [{_cell(url)}]({url})\n" if url else ""


def deps_summary_md(results: dict[str, DepsResult], top: int = 5) -> str:
    """One row per trace (or rank) with the figures every command shows (``report.words``); the
    top fake pairs of each, with the time ready work waited behind them per replay."""
    lines = ["### cgtool deps", "", "| trace | " + " | ".join(words.SUMMARY_COLUMNS) + " |",
             "|---|" + "---:|" * (len(words.SUMMARY_COLUMNS) - 1) + "---|"]
    for name, r in results.items():  # a trace of several graphs: a row per graph (no median across them)
        rows = [(name, r.figures())] if len(r.graphs) <= 1 else [
            (f"{name}: exec graph {gid}", r.figures(gid)) for gid in r.graphs]
        for label, fig in rows:
            lines.append(f"| {_cell(label)} | " + " | ".join(_cell(c) for c in words.summary_cells(fig)) + " |")
    for name, r in results.items():
        fakes = r.fakes()[:top]
        if fakes:
            where = "" if r.fake_visible else " (on single streams; across streams they are not visible)"
            lines += ["", f"Top fake dependencies in {_cell(name)}{where}:", "",
                      "| before | after | count | waited µs/occurrence | estimated saving µs/replay |",
                      "|---|---|---:|---:|---:|"]
            for f in fakes:
                lines.append(f"| #{f.before & 0xFFFFFFFF} {_cell(short_name(f.before_name, 40))} | #{f.after & 0xFFFFFFFF} "
                             f"{_cell(short_name(f.after_name, 40))} | {f.count} | {f.wait_us / f.count if f.count else 0.0:.1f} | "
                             f"{words.num(f.saving_us)} |")
    return "\n".join(lines) + "\n" + report_link()


def report_summary_md(data: Any, where: str) -> str:
    """`cgtool report`'s step summary: the link, and one row per traced graph with the figures
    every command shows (``report.words``)."""
    link = f"[{_cell(where)}]({where})" if where else "the page (written to standard output)"
    lines = ["", "### cgtool report", "", f"{link}: {len(data.graphs)} graph(s), {len(data.bench)} bench result(s)"]
    timed = [v for v in data.graphs if v.figures is not None]
    if timed:
        lines += ["", "| graph | " + " | ".join(words.SUMMARY_COLUMNS) + " |",
                  "|---|" + "---:|" * (len(words.SUMMARY_COLUMNS) - 1) + "---|"]
        for v in timed:
            lines.append(f"| {_cell(v.label)} | " + " | ".join(_cell(c) for c in words.summary_cells(v.figures)) + " |")
    return "\n".join(lines) + "\n"


def diff_summary_md(d: GraphDiff, a: Path, b: Path) -> str:
    """The rows that changed (kernels, node and edge types, metrics), and the counts."""
    lines = ["### cgtool diff", "", f"{_cell(str(a))} → {_cell(str(b))}", "", "| section | key | A | B | change |", "|---|---|---:|---:|---|"]
    from cgtool.inspect.diff import Change

    changed = [r for r in d.rows if r.change is not Change.UNCHANGED]
    for r in changed:
        key = short_name(r.key, 60) if r.section == "kernel" else r.key
        lines.append(f"| {r.section} | {_cell(key)} | {r.a:g} | {r.b:g} | {r.change.value} |")
    if not changed:
        lines.append("| - | no change | | | |")
    lines += ["", " · ".join(f"{k.value} {v}" for k, v in d.counts().items())]
    return "\n".join(lines) + "\n" + report_link()


def append_step_summary(text: str | Callable[[], str]) -> None:
    """Append ``text`` (or what ``text()`` makes: built only when wanted) to the file
    ``GITHUB_STEP_SUMMARY`` names (nothing outside a CI job)."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text if isinstance(text, str) else text())
