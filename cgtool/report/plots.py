"""Bench distributions as SVG plots, drawn by matplotlib (the optional ``report`` extra).

One plot per workload: every sample as a dot (jittered), the box of the quartiles, the median;
the baseline's samples beside them when there is one, and the verdict in the title. The SVG is
inlined in the report: text stays text (``svg.fonttype=none``), so it is small and searchable.
"""

from __future__ import annotations

import io
import re
from typing import Any

from cgtool.artifacts.bench import WorkloadResult
from cgtool.errors import MissingExtraError
from cgtool.inspect.benchstats import Judgement, Verdict

VERDICT_COLOUR = {Verdict.REGRESSED: "#c0392b", Verdict.IMPROVED: "#1e8449", Verdict.UNCHANGED: "#555555",
                  Verdict.NEW: "#2e86c1", Verdict.MISSING: "#c0392b"}


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def require_matplotlib() -> None:
    if not have_matplotlib():
        raise MissingExtraError("Plotting bench results in the report", extra="report",
                                detail="matplotlib")


def bench_plot_svg(w: WorkloadResult, old: WorkloadResult | None, j: Judgement | None) -> str:
    """An inline ``<svg>`` of one workload's GPU µs samples (and its baseline's)."""
    import numpy as np
    from matplotlib import rcParams
    from matplotlib.figure import Figure

    rcParams["svg.fonttype"] = "none"
    rcParams["svg.hashsalt"] = "cgtool"  # deterministic ids
    series = [("this run", list(w.gpu_us))]
    if old is not None and old.gpu_us:
        series.insert(0, ("baseline", list(old.gpu_us)))
    fig = Figure(figsize=(7.0, 0.7 + 0.55 * len(series)), dpi=96)
    ax = fig.add_subplot()
    rng = np.random.default_rng(0)
    for k, (_, xs) in enumerate(series):
        ax.scatter(xs, k + rng.uniform(-0.15, 0.15, len(xs)), s=9, alpha=0.55,
                   color="#7f8c8d" if len(series) == 2 and k == 0 else "#2e86c1", linewidths=0)
    import matplotlib

    # matplotlib 3.10 renamed vert=False to orientation="horizontal" (and deprecated the old name).
    horizontal: dict[str, Any] = ({"orientation": "horizontal"} if tuple(map(int, matplotlib.__version__.split(".")[:2])) >= (3, 10)
                                  else {"vert": False})
    ax.boxplot([xs for _, xs in series], positions=list(range(len(series))), widths=0.5,
               showfliers=False, medianprops={"color": "#c0392b", "linewidth": 2}, **horizontal)
    ax.set_yticks(list(range(len(series))), [name for name, _ in series])
    eager = w.eager_median()
    if eager is not None and eager < 1.5 * max(w.gpu_us, default=0):
        ax.axvline(eager, color="#e67e22", linestyle="--", linewidth=1, label=f"eager median {eager:.1f} µs")
        ax.legend(loc="lower right", fontsize=8, frameon=False)
    ax.set_xlabel("GPU µs per replay")
    title = w.key
    colour = "#222222"
    if j is not None:
        title += f" — {j.verdict.value}: {j.reason}"
        colour = VERDICT_COLOUR.get(j.verdict, colour)
    ax.set_title(title, fontsize=9, loc="left", color=colour)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    return re.sub(r"^.*?(<svg)", r"\1", svg, count=1, flags=re.S)  # drop the XML prolog and doctype
