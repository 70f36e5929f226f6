"""The CI gate's decision logic over bench results (pure: runs anywhere, no GPU).

The results are ``cgtool.artifacts.bench.BenchResults``. The gate calls a workload *regressed* when

1. the median ratio new/old exceeds ``1 + max_regression``, **and**
2. a one-sided Mann–Whitney U test on the block samples gives p < ``alpha`` (asv's choice:
   0.002), **and**
3. the two results' intervals are at least ``min_gap`` (0.5 %, as nvbench's robust compare) apart.
   A result's interval is the interquartile range of its samples, or, when either result's
   between-capture spread is larger than its between-replay spread (captures of the step in
   different allocator states or processes land further apart than the blocks of one capture), the
   range of its captures' medians: a shift no larger than what recapturing alone produces does not
   fail the gate.

Noise therefore does not fail a build (2 and 3 fail on overlapping distributions) and a real
slowdown does (all three hold). The rates are measured by ``benchmarks/bench_gate_rates.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, Sequence

from cgtool.artifacts.bench import BenchResults, Stats, WorkloadResult, env_mismatch
from cgtool.errors import UsageError

DEFAULT_MAX_REGRESSION = 0.02
DEFAULT_ALPHA = 0.002
DEFAULT_MIN_GAP = 0.005


def mann_whitney_greater(new: Sequence[float], old: Sequence[float]) -> float:
    """One-sided p-value that ``new`` tends to be larger than ``old`` (normal approximation with
    tie correction and continuity correction; exact enough for 10+ samples each)."""
    n1, n2 = len(new), len(old)
    if n1 == 0 or n2 == 0:
        return 1.0
    allv = sorted([(v, 0) for v in new] + [(v, 1) for v in old])
    ranks = [0.0] * len(allv)
    i = 0
    tie_term = 0.0
    while i < len(allv):
        j = i
        while j + 1 < len(allv) and allv[j + 1][0] == allv[i][0]:
            j += 1
        r = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[k] = r
        t = j - i + 1
        tie_term += t**3 - t
        i = j + 1
    r1 = sum(r for r, (_, grp) in zip(ranks, allv) if grp == 0)
    u1 = r1 - n1 * (n1 + 1) / 2
    mu = n1 * n2 / 2
    n = n1 + n2
    var = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if var <= 0:
        return 1.0 if u1 <= mu else 0.0
    z = (u1 - mu - 0.5) / math.sqrt(var)
    return 0.5 * math.erfc(z / math.sqrt(2))


class Verdict(str, Enum):
    """How one workload compares with its baseline."""

    REGRESSED = "regressed"  # slower beyond the threshold, and significant
    IMPROVED = "improved"  # faster beyond the threshold, and significant
    UNCHANGED = "unchanged"  # within the threshold or not significant
    NEW = "new"  # no baseline for this workload
    MISSING = "missing"  # in the baseline but not in this run


@dataclass(frozen=True)
class Judgement:
    name: str
    verdict: Verdict
    old_median: float | None
    new_median: float | None
    ratio: float | None
    p_value: float | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "verdict": self.verdict.value, "old_median_us": self.old_median,
                "new_median_us": self.new_median, "ratio": self.ratio, "p_value": self.p_value, "reason": self.reason}


def _interval(samples: Sequence[float], captures: Sequence[float], by_capture: bool) -> tuple[float, float]:
    """The interval a result occupies for the gate's gap test (see the module docstring)."""
    if by_capture and len(captures) >= 2:
        return min(captures), max(captures)
    s = Stats.of(samples)
    return s.q1, s.q3


def capture_bound(w: WorkloadResult) -> bool:
    """The captures of ``w`` land further apart than the blocks of one capture."""
    c, r = w.capture_spread(), w.replay_spread()
    return c is not None and r is not None and c > r


def judge(name: str, old: Sequence[float], new: Sequence[float], *, max_regression: float = DEFAULT_MAX_REGRESSION,
          alpha: float = DEFAULT_ALPHA, min_gap: float = DEFAULT_MIN_GAP, old_captures: Sequence[float] = (),
          new_captures: Sequence[float] = (), by_capture: bool = False) -> Judgement:
    """Judge ``new`` samples against ``old``. With ``by_capture`` the gap of rule 3 is taken between
    the ranges of the captures' medians (``old_captures``, ``new_captures``; a side with fewer than
    two keeps its interquartile range)."""
    so, sn = Stats.of(old), Stats.of(new)
    ratio = sn.median / so.median if so.median > 0 else float("inf")
    p_slow = mann_whitney_greater(new, old)
    p_fast = mann_whitney_greater(old, new)
    (olo, ohi), (nlo, nhi) = _interval(old, old_captures, by_capture), _interval(new, new_captures, by_capture)
    what = "captures' ranges" if by_capture else "interval"
    if ratio > 1 + max_regression:
        gap = (nlo - ohi) / so.median
        if p_slow < alpha and gap >= min_gap:
            return Judgement(name, Verdict.REGRESSED, so.median, sn.median, ratio, p_slow,
                             f"median {100 * (ratio - 1):+.1f}% (> {100 * max_regression:g}%), p={p_slow:.2g}"
                             + (f", {what} {100 * gap:.2f}% apart" if by_capture else ""))
        return Judgement(name, Verdict.UNCHANGED, so.median, sn.median, ratio, p_slow,
                         f"median {100 * (ratio - 1):+.1f}% but not significant (p={p_slow:.2g}, {what} gap {100 * gap:.2f}%)")
    if ratio < 1 - max_regression and p_fast < alpha and (olo - nhi) / so.median >= min_gap:
        return Judgement(name, Verdict.IMPROVED, so.median, sn.median, ratio, p_fast, f"median {100 * (ratio - 1):+.1f}%")
    return Judgement(name, Verdict.UNCHANGED, so.median, sn.median, ratio, p_slow,
                     f"median {100 * (ratio - 1):+.1f}% (within {100 * max_regression:g}%)")


def judge_results(name: str, old: WorkloadResult, new: WorkloadResult, **kw: Any) -> Judgement:
    """``judge`` on two results, by capture when either one's captures spread wider than its replays."""
    return judge(name, old.gpu_us, new.gpu_us, old_captures=old.capture_medians(),
                 new_captures=new.capture_medians(), by_capture=capture_bound(old) or capture_bound(new), **kw)


def parse_percent(s: str) -> float:
    """'5%' -> 0.05, '0.05' -> 0.05."""
    try:
        v = float(s[:-1]) / 100 if s.strip().endswith("%") else float(s)
    except ValueError:
        raise UsageError(f"--max-regression takes a percentage like 5% (or 0.05), not {s!r}.") from None
    if not 0 <= v < 1:
        raise UsageError(f"--max-regression must be between 0% and 100%, not {s!r}.")
    return v


def compare_results(old: BenchResults, new: BenchResults, **kw: Any) -> list[Judgement]:
    """A judgement per workload (and rank) in either result, matched on workload and rank."""
    out = []
    ow, nw = old.by_ident(), new.by_ident()
    for ident in sorted(set(ow) | set(nw), key=lambda i: (i[0], -1 if i[1] is None else i[1])):
        o, n = ow.get(ident), nw.get(ident)
        name = (n or o).key  # type: ignore[union-attr]
        if n is None or n.failed:
            out.append(Judgement(name, Verdict.MISSING, None, None, None, None,
                                 "not in this run" if n is None else f"failed: {(n.error or '')[:80]}"))
        elif o is None or o.failed:
            out.append(Judgement(name, Verdict.NEW, None, n.stats().median, None, None, "no baseline"))
        else:
            out.append(judge_results(name, o, n, **kw))
    return out


def refuse_env_mismatch(old: BenchResults, new: BenchResults, baseline: object,
                        flag: str = "--allow-env-mismatch") -> None:
    """Refuse to judge ``new`` against ``old`` (read from ``baseline``) when their environment
    fingerprints differ; ``flag`` is the option that allows it (``cgtool bench``'s, or the pytest
    plugin's). A result without an environment (every workload failed) is not refused here."""
    bad = env_mismatch(old, new) if new.environment else []
    if bad:
        raise UsageError(f"The baseline {baseline} comes from another environment ({'; '.join(bad)}); timings "
                         "do not compare across GPUs, drivers or torch versions. Record a new baseline here, "
                         f"or pass {flag}.")
