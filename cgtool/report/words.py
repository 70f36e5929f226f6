"""The words for the derived figures (``cgtool.inspect.results.Figures``), shared by every renderer:
the tables of ``deps`` and ``topo --trace``, the label of ``dot --trace``, the HTML report and the CI
step summary say the same thing the same way.

Rules: a wait is not a loss (it is "waited", per replay); a saving is "estimated"; a figure the
trace cannot show is "not visible" or "cannot tell" with the reason, never 0.
"""

from __future__ import annotations

from cgtool.inspect.analyzers.waits import DETECTION_QUALITY, EXACT_ANSWER
from cgtool.inspect.results import Figures, Lane, MatchKind
from cgtool.text import plural


def us(v: float | None) -> str:
    """µs below a millisecond, ms above; "-" for unknown."""
    return "-" if v is None else (f"{v / 1000:.2f} ms" if abs(v) >= 1000 else f"{v:.1f} µs")


def num(v: float | None, nd: int = 1) -> str:
    """A plain number for a table cell ("-" for unknown)."""
    return "-" if v is None else f"{v:.{nd}f}"


def span(f: Figures) -> str:
    return f"median {us(f.span_median_us)}, mean {us(f.span_mean_us)} per replay"


def critical_path(f: Figures) -> str:
    return f"{us(f.critical_path_us)} measured (median replay)"


def fake(f: Figures) -> str:
    if f.fake is None:
        extra = (f"; {plural(f.fake_on_one_stream, 'fake serialization')} on single streams"
                 if f.fake_on_one_stream else "")
        return "not visible without hardware channels" + extra
    if not f.fake:
        return "0 (no independent work was serialized on a hardware channel)"
    s = (f"{f.fake} ({plural(f.fake_pairs or 0, 'distinct pair')}, {f.fake_per_replay:.1f} per replay); "
         f"the items behind them waited {us(f.fake_wait_us)} per replay in all, each from its ready time to "
         "its start (a wait, not a loss)")
    if f.fake_wait_us is not None and f.span_median_us is not None and f.fake_wait_us > f.span_median_us:
        s += (f"; more than the {us(f.span_median_us)} span because several items waited at the same time, "
              "each counted")
    return s


#: Under the table of fake dependencies: what each column is measured from.
FAKE_TABLE_LEGEND = (
    "after started once before had ended, no item starting on the {lane} between them; a {lane} runs several "
    "items at once, so items that started earlier may still have run in the gap (shown where known): after "
    "started when the {lane} had room, not when before ended. gap: before's end to after's start, mean. waited: "
    "after's ready time (the end of its last graph predecessor, or its replay's first start) to its start, per "
    "occurrence. saving: per replay, estimated.")


def waits(f: Figures) -> str:
    if not f.waits:
        return "none found in the timing"
    return f"{f.waits} ({plural(f.waits_pairs or 0, 'distinct pair')}), {us(f.waits_us)} per replay, inferred from timing"


def cannot_tell(f: Figures) -> str:
    return (f"{plural(f.cannot_tell or 0, 'late start')} ({us(f.cannot_tell_us)} per replay): "
            f"{f.cannot_tell_reason or 'the timing does not say'}")


def saving(f: Figures) -> str:
    if f.saving_us is None:
        if f.lane is Lane.STREAM:
            told = (f"; {plural(f.cannot_tell, 'late start')} the timing cannot tell apart from them"
                    if f.cannot_tell else "")
            return ("unknown: fake serializations are not visible without hardware channels, and no wait "
                    f"was inferred from timing{told}")
        return "not estimated"
    share = "" if f.saving_share is None else f" ({100 * f.saving_share:.1f}% of the mean span"
    share += (", the GPU was full" if f.gpu_filled else "") + ")" if share else ""
    if f.saving_basis == "inferred waits":
        return (f"{us(f.saving_us)} per replay if the inferred waits were fake serializations{share}: "
                "an estimate from timing, not a measurement")
    if f.saving_basis == "serializations on one stream":
        return (f"{us(f.saving_us)} per replay without the independent work serialized on one stream, "
                f"estimated{share}; serializations across hardware channels are not visible in this trace")
    return f"{us(f.saving_us)} per replay without the fake serializations, estimated{share}"


def lanes(f: Figures) -> str:
    if f.lane is Lane.STREAM:
        return "streams (no channel data in the trace)"
    if f.channels_from and f.channels_from != "the trace":
        return f"hardware channel 0 for every stream ({f.channels_from})"
    return "hardware channels"


def match(f: Figures) -> str:
    if f.match is MatchKind.EXACT:
        return "exact (graph node ids)"
    cert = ", ".join(f"{v} {k}" for k, v in sorted(f.certainty.items()))
    return f"INFERRED (launch, name, shape, stream, time): {cert or 'no serializations'}"


def replays(f: Figures) -> str:
    """The replays the trace holds (``traced replays``: a trace may cover only some of a program's)."""
    s = f"{f.replays} of exec graph {', '.join(map(str, f.graphs))}"
    if f.incomplete_replays:
        s += f"; {f.incomplete_replays} more left out (events missing)"
    return s


def timing_rows(f: Figures) -> list[tuple[str, str]]:
    """The rows every command shows for a traced graph: replays, span, critical path."""
    return [("traced replays", replays(f)), ("span", span(f)), ("critical path", critical_path(f))]


def run_rows(f: Figures, n_graphs: int) -> list[tuple[str, str]]:
    """The rows of a trace of several graphs taken together: only what adds up over graphs (counts),
    never a median or a critical path across different graphs (those are per graph, below)."""
    rows = [("traced replays", f"{f.replays} of {n_graphs} graphs (per graph below)")]
    if f.incomplete_replays:
        rows[0] = (rows[0][0], rows[0][1] + f"; {f.incomplete_replays} more left out (events missing)")
    rows.append(("true dependencies", f"{f.true} ({plural(f.true_pairs, 'distinct pair')})"))
    rows.append(("fake dependencies", "not visible without hardware channels" if f.fake is None else
                 f"{f.fake} ({plural(f.fake_pairs or 0, 'distinct pair')})" if f.fake else
                 "0 (no independent work was serialized on a hardware channel)"))
    if f.lane is Lane.STREAM:
        rows.append(("waits behind unrelated work", "none found in the timing" if not f.waits else
                     f"{f.waits} ({plural(f.waits_pairs or 0, 'distinct pair')}), inferred from timing"))
    rows.append(("lanes", lanes(f)))
    rows.append(("match", match(f)))
    return rows


#: The per-graph table of a trace of several graphs: the same figures topo --trace shows per graph.
GRAPH_COLUMNS = ("graph", "replays", "median span", "critical path", "true", "fake", "saving")


def graph_cells(name: str, f: Figures) -> list[str]:
    return [name, str(f.replays), us(f.span_median_us), us(f.critical_path_us), str(f.true),
            "-" if f.fake is None else str(f.fake), us(f.saving_us)]


def figure_rows(f: Figures) -> list[tuple[str, str]]:
    """Every row of the figures, in the order every renderer shows them."""
    rows = timing_rows(f)
    rows.append(("true dependencies", f"{f.true} ({plural(f.true_pairs, 'distinct pair')})"))
    rows.append(("fake dependencies", fake(f)))
    if f.lane is Lane.STREAM:
        rows.append(("waits behind unrelated work", waits(f)))
        if f.cannot_tell:
            rows.append(("cannot tell", cannot_tell(f)))
        rows.append(("how sure", DETECTION_QUALITY))
        rows.append(("exact answer", EXACT_ANSWER))
    if f.undecided:
        rows.append(("undecided", f"{plural(f.undecided, 'serialization')} (the consistent node assignments disagree)"))
    rows.append(("estimated saving", saving(f)))
    rows.append(("lanes", lanes(f)))
    rows.append(("match", match(f)))
    return rows


#: The step summary's columns, and the cell of each (the same words, shortened to fit a table).
SUMMARY_COLUMNS = ("replays", "median span µs", "mean span µs", "critical path µs", "true", "fake",
                   "waited µs/replay", "estimated saving µs/replay", "lanes")


def summary_cells(f: Figures) -> list[str]:
    if f.fake is None:
        fake_cell = "not visible (no channels)"
        waited = f"{num(f.waits_us)} (inferred)"
    else:
        fake_cell, waited = str(f.fake), num(f.fake_wait_us)
    sav = num(f.saving_us) + (" (if the waits were fake)" if f.saving_basis == "inferred waits" else "")
    return [str(f.replays), num(f.span_median_us), num(f.span_mean_us), num(f.critical_path_us), str(f.true),
            fake_cell, waited, sav, f.lane.value]
