"""Two traces of one graph (e.g. two CUDA_DEVICE_MAX_CONNECTIONS settings) judged by measured span."""

from __future__ import annotations

from typing import Any

from cgtool.errors import InvalidInputError
from cgtool.inspect import cost as costmod
from cgtool.inspect.results import DepsResult


def compare_traces(a: DepsResult, b: DepsResult, name_a: str = "a", name_b: str = "b") -> dict[str, Any]:
    """Judge two traces of the same graph (e.g. CUDA_DEVICE_MAX_CONNECTIONS=1 and default) by
    measured span per replay: medians, spreads (IQR), and whether B is faster, slower or the same
    within the spread. Also puts each one's estimated saving beside the measured difference."""
    ea, eb = sorted(set(a.replay_table["events"].tolist())), sorted(set(b.replay_table["events"].tolist()))
    if ea != eb:
        raise InvalidInputError(
            f"{name_a} and {name_b} are not traces of the same graph: their replays have {ea} and {eb} GPU "
            "events. --compare judges two traces of one graph (e.g. two CUDA_DEVICE_MAX_CONNECTIONS settings)."
        )
    out = costmod.compare_spans(a.replay_table["span_us"], b.replay_table["span_us"])
    out["a"]["trace"], out["b"]["trace"] = name_a, name_b
    out["a"]["fake"] = a.n_fake if a.fake_visible else None  # unknown without channels, not 0
    out["b"]["fake"] = b.n_fake if b.fake_visible else None
    out["a"]["estimated_saving_us"] = a.cost.get("saving_us")
    out["b"]["estimated_saving_us"] = b.cost.get("saving_us")
    return out
