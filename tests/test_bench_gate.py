"""The gate's decision logic on the CPU, with recorded (H200) and generated samples."""

import json
import random

import pytest

from cgtool.errors import InvalidInputError, UsageError
from cgtool.artifacts.bench import BenchResults, Stats, env_mismatch, quantile
from cgtool.inspect.benchstats import Verdict, compare_results, judge, mann_whitney_greater, parse_percent


def validate_results(doc, source):
    return BenchResults.from_json(doc, source)


def gen(median, n=20, rel_noise=0.003, seed=0, scale=1.0):
    rng = random.Random(seed)
    return [median * scale * rng.lognormvariate(0, rel_noise) for _ in range(n)]


def test_identical_runs_pass():
    xs = gen(100)
    assert judge("w", xs, list(xs)).verdict is Verdict.UNCHANGED


def test_five_percent_slowdown_fails():
    j = judge("w", gen(100, seed=1), gen(100, seed=2, scale=1.05))
    assert j.verdict is Verdict.REGRESSED and j.ratio == pytest.approx(1.05, abs=0.01)


def test_noisy_equal_runs_pass():
    # 20 % noise: medians of equal distributions wander, but the test is not significant.
    flagged = sum(judge("w", gen(100, rel_noise=0.2, seed=s), gen(100, rel_noise=0.2, seed=s + 1000)).verdict
                  is Verdict.REGRESSED for s in range(200))
    assert flagged <= 2


def test_a_large_but_insignificant_ratio_is_not_a_regression():
    old = [100, 100, 100, 300, 300, 300]
    new = [100, 100, 300, 300, 300, 300]
    j = judge("w", old, new)
    assert j.ratio > 1.02 and j.verdict is Verdict.UNCHANGED and "not significant" in j.reason


def test_improvement_is_reported():
    assert judge("w", gen(100, seed=3), gen(100, seed=4, scale=0.9)).verdict is Verdict.IMPROVED


def test_recorded_h200_reruns_pass_and_scaled_reruns_fail(data_dir):
    doc = json.loads((data_dir / "bench" / "reruns.json").read_text())
    for name, runs in doc["reruns"].items():
        for a, b in zip(runs, runs[1:]):
            assert judge(name, a, b).verdict is Verdict.UNCHANGED, name
            assert judge(name, a, [x * 1.06 for x in b]).verdict is Verdict.REGRESSED, name


def test_mann_whitney_matches_scipy():
    scipy = pytest.importorskip("scipy.stats")
    for seed in range(5):
        a, b = gen(100, 25, 0.05, seed), gen(101, 30, 0.05, seed + 50)
        ref = scipy.mannwhitneyu(a, b, alternative="greater", method="asymptotic").pvalue
        assert mann_whitney_greater(a, b) == pytest.approx(ref, rel=1e-6)


def test_quantiles_and_stats():
    xs = list(range(1, 101))
    assert quantile(xs, 0.5) == 50.5 and quantile(xs, 0.25) == pytest.approx(25.75)
    s = Stats.of([10.0] * 10 + [20.0] * 10)
    assert s.noisy and s.min == 10.0 and not Stats.of([10.0] * 20).noisy


def test_percent_parsing():
    assert parse_percent("5%") == 0.05 and parse_percent("0.02") == 0.02
    with pytest.raises(UsageError):
        parse_percent("five")


def _doc(samples, env=None):
    return BenchResults.from_json(
        {"kind": "bench", "schema_version": 1, "environment": env or {"device": "H200", "torch": "2.11"},
         "workloads": {k: {"gpu_us": v} for k, v in samples.items()}}, "test")


def test_compare_results_new_and_missing():
    old = _doc({"a": gen(10), "b": gen(20)})
    new = _doc({"a": gen(10, seed=9), "c": gen(5)})
    verdicts = {j.name: j.verdict for j in compare_results(old, new)}
    assert verdicts == {"a": Verdict.UNCHANGED, "b": Verdict.MISSING, "c": Verdict.NEW}


def test_env_mismatch_is_found():
    assert env_mismatch(_doc({}), _doc({}, {"device": "H100", "torch": "2.11"}))
    assert not env_mismatch(_doc({}), _doc({}))


@pytest.mark.parametrize("bad", [[], {"kind": "bench"}, {"kind": "bench", "workloads": {"a": {"gpu_us": ["x"]}}},
                                 {"kind": "bench", "workloads": {"a": {"gpu_us": []}}},
                                 {"kind": "bench", "schema_version": 9, "workloads": {}}])
def test_invalid_result_files(bad):
    with pytest.raises(InvalidInputError):
        validate_results(bad, "r.json")


def test_recorded_bench_file_is_valid(data_dir):
    doc = validate_results(json.loads((data_dir / "bench" / "h200_samples.json").read_text()), "x")
    chain = doc.by_ident()[("sample_workloads/chain.py", None)]
    # the launch-bound chain is what graphs are for: replay several times faster than eager
    assert Stats.of(chain.eager_us).median / Stats.of(chain.gpu_us).median > 4
