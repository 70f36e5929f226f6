"""`cgtool report`: one self-contained HTML page of a graph, its replays and its timing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from cgtool.cli.analysis import Collapse, Expand, MaxFold
from cgtool.cli._common import DEFAULT_MAX_BYTES, Force, MaxBytes, err, output_path, wrote
from cgtool.errors import UsageError
from cgtool.inspect import DEFAULT_TOLERANCE_US
from cgtool.report.fold import MAX_FOLD, MIN_FOLD
from cgtool.text import plural


def report(
    inputs: Annotated[list[Path], typer.Argument(metavar="INPUT...", show_default=False, help="Graph exports, traces (cgtool's, or torch.profiler's beside the export), capture bundles, per-rank or `cgtool record` folders, folders of artifacts, bench results: told apart by content (docs/inputs.md).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="The HTML file to write (`-`: standard output).")] = Path("report.html"),
    baseline: Annotated[Optional[Path], typer.Option(help="Bench results to judge the bench inputs against (plotted beside them).")] = None,
    title: Annotated[Optional[str], typer.Option(help="The page's title (default: cgtool report: the inputs' names).")] = None,
    collapse: Collapse = MIN_FOLD,
    max_fold: MaxFold = MAX_FOLD,
    expand: Expand = False,
    open_: Annotated[bool, typer.Option("--open", help="Open the report in a web browser.")] = False,
    force: Force = False,
    max_bytes: MaxBytes = DEFAULT_MAX_BYTES,
) -> None:
    """One HTML page: the graph (critical path, fake dependencies, durations), one replay's timeline
    per channel, the deps and topology summaries, bench plots. Works offline: nothing is fetched."""
    from cgtool.artifacts.jsonio import atomic_write_bytes, is_stdout
    from cgtool.inspect.gather import gather
    from cgtool.report.html import render_html
    from cgtool.report.plots import have_matplotlib
    from cgtool.report.summary_md import REPORT_URL_ENV, append_step_summary, report_summary_md

    if is_stdout(output) and open_:
        raise UsageError("--open needs the page in a file: give -o report.html, not -o -.")
    output_path(output, force, inputs=(*inputs, baseline))
    data = gather(inputs, baseline=baseline, tolerance_us=DEFAULT_TOLERANCE_US, max_bytes=max_bytes)
    plots = have_matplotlib()
    if data.bench and not plots:
        err.print("note: matplotlib is not installed, so bench distributions are not plotted; "
                  "install them with `pip install 'cgtool[report]'`.", markup=False, highlight=False,
                  soft_wrap=True)
    title = title or "cgtool report: " + ", ".join(p.name for p in inputs[:3]) + (", ..." if len(inputs) > 3 else "")
    page = render_html(data, title=title, plots=plots, min_fold=0 if expand else collapse, max_fold=max_fold,
                       recordings=data.recordings)
    atomic_write_bytes(output, page.encode(), force=force)
    wrote(output, f"({plural(len(data.graphs), 'graph')}, {plural(len(data.bench), 'bench result')})")
    url = os.environ.get(REPORT_URL_ENV, "").strip() or ("" if is_stdout(output) else str(output))
    append_step_summary(report_summary_md(data, url))
    if open_:
        import webbrowser

        if not webbrowser.open(output.resolve().as_uri()):
            err.print(f"no web browser found; open {output} yourself", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command(name="report", rich_help_panel="Analyse files (no GPU)")(report)
