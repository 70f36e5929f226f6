"""The gate's statistics against scipy and numpy, on tied samples and at the gate's boundaries.

Bench timings are quantized (CUDA events resolve about 0.5 µs), so samples tie. The gate's rule is
recomputed here from its definition (cgtool/inspect/benchstats.py's docstring) with scipy's
Mann–Whitney U and numpy's quantiles, and compared with ``judge`` over many generated cases,
including those that sit exactly on a threshold.
"""

from __future__ import annotations

import random
import statistics
from typing import Sequence

import numpy as np
import pytest

from cgtool.artifacts.bench import BenchSpec, WorkloadResult
from cgtool.errors import InvalidInputError, UsageError
from cgtool.inspect.benchstats import (DEFAULT_ALPHA, DEFAULT_MAX_REGRESSION, DEFAULT_MIN_GAP, Verdict, capture_bound,
                                       compare_results, judge, judge_results, mann_whitney_greater,
                                       parse_percent)

scipy_stats = pytest.importorskip("scipy.stats")


def quantized(median: float, n: int, noise: float, seed: int, step: float = 0.5) -> list[float]:
    """Samples rounded to ``step`` µs: many ties."""
    rng = random.Random(seed)
    return [max(step, round(median * rng.lognormvariate(0, noise) / step) * step) for _ in range(n)]


def scipy_p(new: Sequence[float], old: Sequence[float]) -> float:
    return float(scipy_stats.mannwhitneyu(new, old, alternative="greater", method="asymptotic",
                                          use_continuity=True).pvalue)


@pytest.mark.parametrize("seed", range(12))
def test_mann_whitney_with_ties_matches_scipy(seed: int) -> None:
    rng = random.Random(seed)
    n1, n2 = rng.randrange(3, 40), rng.randrange(3, 40)
    a = quantized(100, n1, 0.01, seed, step=rng.choice([0.5, 1.0, 2.0]))
    b = quantized(100.5, n2, 0.01, seed + 100, step=0.5)
    assert len(set(a + b)) < len(a + b)  # ties
    for x, y in ((a, b), (b, a)):
        assert mann_whitney_greater(x, y) == pytest.approx(scipy_p(x, y), rel=1e-9, abs=1e-12)


def test_mann_whitney_on_small_and_degenerate_samples() -> None:
    for x, y in (([1.0], [2.0, 2.0]), ([2.0, 2.0, 3.0], [2.0]), ([5.0, 5.0], [4.0, 5.0, 5.0]),
                 ([1.0, 2.0], [1.0, 2.0]), ([3.0, 1.0, 2.0], [2.0, 2.0])):
        assert mann_whitney_greater(x, y) == pytest.approx(scipy_p(x, y), rel=1e-9), (x, y)
    # every sample equal: no evidence either way
    assert mann_whitney_greater([4.0] * 5, [4.0] * 7) == 1.0
    # an empty side: no evidence
    assert mann_whitney_greater([], [1.0, 2.0]) == 1.0 and mann_whitney_greater([1.0], []) == 1.0


def _interval(samples: Sequence[float], captures: Sequence[float], by_capture: bool) -> tuple[float, float]:
    if by_capture and len(captures) >= 2:
        return min(captures), max(captures)
    q1, q3 = np.percentile(samples, [25, 75])
    return float(q1), float(q3)


def gate(old: Sequence[float], new: Sequence[float], max_regression: float = DEFAULT_MAX_REGRESSION,
         alpha: float = DEFAULT_ALPHA, min_gap: float = DEFAULT_MIN_GAP, old_captures: Sequence[float] = (),
         new_captures: Sequence[float] = (), by_capture: bool = False) -> tuple[Verdict, float, float]:
    """The rule, from its definition: (verdict, ratio of medians, p-value reported)."""
    mo, mn = statistics.median(old), statistics.median(new)
    ratio = mn / mo
    p_slow, p_fast = scipy_p(new, old), scipy_p(old, new)
    (olo, ohi), (nlo, nhi) = _interval(old, old_captures, by_capture), _interval(new, new_captures, by_capture)
    if ratio > 1 + max_regression:
        if p_slow < alpha and (nlo - ohi) / mo >= min_gap:
            return Verdict.REGRESSED, ratio, p_slow
        return Verdict.UNCHANGED, ratio, p_slow
    if ratio < 1 - max_regression and p_fast < alpha and (olo - nhi) / mo >= min_gap:
        return Verdict.IMPROVED, ratio, p_fast
    return Verdict.UNCHANGED, ratio, p_slow


@pytest.mark.parametrize("seed", range(40))
def test_judge_is_the_gate_rule(seed: int) -> None:
    rng = random.Random(seed)
    scale = rng.choice([0.9, 0.97, 0.98, 0.99, 1.0, 1.01, 1.02, 1.03, 1.05, 1.2])
    noise = rng.choice([0.001, 0.005, 0.02, 0.1])
    old = quantized(200, rng.randrange(5, 30), noise, seed, step=rng.choice([0.1, 0.5]))
    new = quantized(200 * scale, rng.randrange(5, 30), noise, seed + 7, step=0.5)
    mr = rng.choice([0.0, 0.01, 0.02, 0.05])
    j = judge("w", old, new, max_regression=mr)
    verdict, ratio, p = gate(old, new, max_regression=mr)
    assert (j.verdict, j.ratio, j.old_median, j.new_median) == (verdict, pytest.approx(ratio), statistics.median(old),
                                                                statistics.median(new))
    assert j.p_value == pytest.approx(p, rel=1e-9, abs=1e-15)


def test_the_thresholds_are_where_the_rule_puts_them() -> None:
    """A ratio of exactly 1 + max_regression is within it; a gap of exactly min_gap is apart enough;
    a p-value must be below alpha, not equal."""
    old = [100.0] * 10 + [101.0] * 10
    new = [x + 5.0 for x in old]  # ratio (105.5 / 100.5), intervals apart by 4.0 / 100.5
    ratio = 105.5 / 100.5
    assert judge("w", old, new, max_regression=ratio - 1).verdict is Verdict.UNCHANGED
    assert judge("w", old, new, max_regression=ratio - 1 - 1e-9).verdict is Verdict.REGRESSED
    gap = (np.percentile(new, 25) - np.percentile(old, 75)) / statistics.median(old)
    assert judge("w", old, new, min_gap=gap).verdict is Verdict.REGRESSED
    assert judge("w", old, new, min_gap=gap + 1e-9).verdict is Verdict.UNCHANGED
    p = scipy_p(new, old)
    assert judge("w", old, new, alpha=p).verdict is Verdict.UNCHANGED
    assert judge("w", old, new, alpha=p * (1 + 1e-9)).verdict is Verdict.REGRESSED
    # and the same boundaries for an improvement (new faster)
    faster = [x - 5.0 for x in old]
    r = 95.5 / 100.5
    assert judge("w", old, faster, max_regression=1 - r).verdict is Verdict.UNCHANGED
    assert judge("w", old, faster, max_regression=1 - r - 1e-9).verdict is Verdict.IMPROVED
    gap = (np.percentile(old, 25) - np.percentile(faster, 75)) / statistics.median(old)
    assert judge("w", old, faster, min_gap=gap).verdict is Verdict.IMPROVED
    assert judge("w", old, faster, min_gap=gap + 1e-9).verdict is Verdict.UNCHANGED
    p = scipy_p(old, faster)
    assert judge("w", old, faster, alpha=p).verdict is Verdict.UNCHANGED
    assert judge("w", old, faster, alpha=p * (1 + 1e-9)).verdict is Verdict.IMPROVED


def _result(captures: Sequence[Sequence[float]]) -> WorkloadResult:
    return WorkloadResult("w", gpu_us=tuple(x for c in captures for x in c), spec=BenchSpec(recaptures=len(captures)),
                          capture_medians_us=tuple(statistics.median(c) for c in captures))


def test_capture_bound_on_one_side_judges_both_by_their_captures() -> None:
    tight = [[100.0, 100.5, 100.0, 100.5] * 5, [100.0, 100.5, 100.5, 100.0] * 5]  # exactly two captures, equal
    loose = [[100.0, 100.5] * 10, [106.0, 106.5] * 10]  # two captures 6 % apart, blocks within 0.5 %
    t, lo = _result(tight), _result(loose)
    assert not capture_bound(t) and capture_bound(lo)
    for old, new in ((t, lo), (lo, t)):
        for min_gap in (0.0, DEFAULT_MIN_GAP):
            j = judge_results("w", old, new, min_gap=min_gap)
            # one side bound: both sides judged by their captures' ranges (two captures each)
            verdict, ratio, p = gate(old.gpu_us, new.gpu_us, old_captures=old.capture_medians(), min_gap=min_gap,
                                     new_captures=new.capture_medians(), by_capture=True)
            assert (j.verdict, j.ratio, j.p_value) == (verdict, pytest.approx(ratio), pytest.approx(p, rel=1e-9))
    # the ranges of two captures touch (new's starts at old's): apart by 0, which only a min_gap of 0 allows
    assert judge_results("w", t, lo, min_gap=0.0).verdict is Verdict.REGRESSED
    assert judge_results("w", t, lo).verdict is Verdict.UNCHANGED
    # one capture on a side: that side keeps its interquartile range
    one = _result([[100.0, 100.5] * 10])
    assert one.capture_spread() is None and not capture_bound(one)
    for min_gap in (0.0, DEFAULT_MIN_GAP):
        j = judge_results("w", one, lo, min_gap=min_gap)
        assert (j.verdict, j.ratio) == gate(one.gpu_us, lo.gpu_us, old_captures=one.capture_medians(), min_gap=min_gap,
                                            new_captures=lo.capture_medians(), by_capture=True)[:2]


def test_capture_bound_compares_the_spreads() -> None:
    """Captures further apart than one capture's blocks: bound; as far apart: not."""
    blocks = [100.0, 101.0, 100.0, 101.0]  # each capture's IQR / median: 1 / 100.5
    apart = _result([blocks, [x + 1.0 for x in blocks]])  # medians 100.5 and 101.5
    # each capture's IQR over its median (1/100.5, 1/101.5), their median; the medians' range over their median
    assert apart.replay_spread() == pytest.approx((1 / 100.5 + 1 / 101.5) / 2)
    assert apart.capture_spread() == pytest.approx(1 / 101.0)
    assert not capture_bound(apart)  # 1/101 < 1/100.5
    further = _result([blocks, [x + 1.5 for x in blocks]])
    assert capture_bound(further)


@pytest.mark.parametrize("text, value", [("150%", None), ("100%", None), ("-1%", None), ("1.5", None), ("1", None),
                                         ("0%", 0.0), ("99.5%", 0.995), ("0.02", 0.02), ("5%", 0.05)])
def test_max_regression_percentages(text: str, value: float | None) -> None:
    if value is None:
        with pytest.raises(UsageError, match="between 0% and 100%"):
            parse_percent(text)
    else:
        assert parse_percent(text) == pytest.approx(value)


def test_empty_samples_and_an_old_median_of_zero_are_refused() -> None:
    """The gate's figures are relative to the old median: without samples, or with a median of 0,
    there is nothing to judge, and the judge says so instead of dividing by zero."""
    xs = [100.0, 101.0, 102.0]
    for old, new, words in (([], xs, "no old samples"), (xs, [], "no new samples"),
                            ([0.0, 0.0, 1.0], xs, "old median of 0")):
        with pytest.raises(InvalidInputError, match=words):
            judge("w", old, new)


def test_capture_bound_needs_the_captures_strictly_wider() -> None:
    """Three captures whose blocks spread 2 µs around medians 100, 101 and 102: the captures' spread
    (2 / 101) equals the blocks' (the median of 2/100, 2/101, 2/102): not bound."""
    caps = [[m - 1.0, m - 1.0, m + 1.0, m + 1.0] for m in (100.0, 101.0, 102.0)]
    w = _result(caps)
    assert w.capture_spread() == w.replay_spread() == 2.0 / 101.0
    assert not capture_bound(w)


def test_the_reasons_name_what_was_compared() -> None:
    old = [100.0, 100.0, 100.0, 300.0, 300.0, 300.0]
    new = [100.0, 100.0, 300.0, 300.0, 300.0, 300.0]  # the median doubles, not significantly
    j = judge("w", old, new)
    assert j.verdict is Verdict.UNCHANGED and "not significant" in j.reason and "interval gap" in j.reason
    caps = judge("w", old, new, old_captures=(100.0, 300.0), new_captures=(100.0, 300.0), by_capture=True)
    assert "captures' ranges gap" in caps.reason


def test_sub_microsecond_samples_are_judged() -> None:
    """A median under 1 µs is a time like any other (only a median of 0 cannot be compared with)."""
    old = [0.5, 0.5, 0.6, 0.5, 0.5] * 4
    assert judge("w", old, list(old)).verdict is Verdict.UNCHANGED
    assert judge("w", old, [x * 2 for x in old]).verdict is Verdict.REGRESSED


def test_alpha_is_a_strict_bound_on_the_p_value_reported() -> None:
    old = [100.0] * 10 + [101.0] * 10
    for new, verdict in (([x + 5.0 for x in old], Verdict.REGRESSED), ([x - 5.0 for x in old], Verdict.IMPROVED)):
        p = judge("w", old, new).p_value
        assert p is not None and judge("w", old, new, alpha=p).verdict is Verdict.UNCHANGED
        assert judge("w", old, new, alpha=float(np.nextafter(p, 1.0))).verdict is verdict


def test_compare_results_orders_by_workload_then_rank() -> None:
    from cgtool.artifacts.bench import BenchResults

    def doc(seed: int) -> BenchResults:
        rng = random.Random(seed)
        w: dict[str, dict[str, object]] = {}
        for name, rank in (("b", 2), ("a", 10), ("a", None), ("a", 1), ("b", None), ("a", 0)):
            key = name if rank is None else f"{name} [rank {rank}]"
            w[key] = {"workload": name, "gpu_us": [100 + rng.random() for _ in range(5)],
                      **({} if rank is None else {"rank": rank})}
        return BenchResults.from_json({"kind": "bench", "schema_version": 1, "environment": {}, "workloads": w}, "t")

    names = [j.name for j in compare_results(doc(1), doc(2))]
    assert names == ["a", "a [rank 0]", "a [rank 1]", "a [rank 10]", "b", "b [rank 2]"]


def test_results_of_another_environment_are_refused_unless_allowed() -> None:
    from cgtool.artifacts.bench import BenchResults
    from cgtool.inspect.benchstats import refuse_env_mismatch

    def doc(env: dict[str, str]) -> BenchResults:
        return BenchResults.from_json({"kind": "bench", "schema_version": 1, "environment": env,
                                       "workloads": {"a": {"gpu_us": [1.0, 2.0]}}}, "t")

    h200, h100 = doc({"device": "H200", "torch": "2.11"}), doc({"device": "H100", "torch": "2.11"})
    with pytest.raises(UsageError, match=r"base\.json comes from another environment.*--allow-env-mismatch"):
        refuse_env_mismatch(h200, h100, "base.json")
    with pytest.raises(UsageError, match="--cgtool-allow"):
        refuse_env_mismatch(h200, h100, "base.json", flag="--cgtool-allow")
    refuse_env_mismatch(h200, doc({"device": "H200", "torch": "2.11"}), "base.json")  # the same: judged
    refuse_env_mismatch(h200, doc({}), "base.json")  # no environment (every workload failed): not refused here
