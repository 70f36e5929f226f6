"""The gate's decision logic on the CPU, with recorded (H200) and generated samples."""

import gzip
import json
import random
import statistics
from pathlib import Path

import pytest

from cgtool.errors import InvalidInputError, UsageError
from cgtool.artifacts.bench import BenchResults, BenchSpec, Stats, WorkloadResult, env_mismatch, quantile
from cgtool.inspect.benchstats import (Verdict, capture_bound, compare_results, judge, judge_results,
                                       mann_whitney_greater, parse_percent)

ROOT = Path(__file__).resolve().parents[1]


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


# ---------------------------------------------------------------- the spec, old files, spreads

def test_spec_round_trip_and_block_split():
    spec = BenchSpec(replays=1003, blocks=20, warmup=7, per_replay=False, cold_cache=False, recaptures=5, eager=False)
    assert BenchSpec.from_json(json.loads(json.dumps(spec.to_json())), "t") == spec
    sizes = spec.block_sizes()
    assert sum(sizes) == 1003 and len(sizes) == 20 and max(sizes) - min(sizes) <= 1
    assert spec.sampling == "blocks of 50-51" and BenchSpec(replays=1000).sampling == "blocks of 50"
    assert BenchSpec(cold_cache=True).sampling == "per-replay" and BenchSpec(cold_cache=True).per_replay_events


@pytest.mark.parametrize("bad", [[], {"replays": 0}, {"replays": "1000"}, {"blocks": True}, {"warmup": -1},
                                 {"recaptures": 2**70}, {"eager": "yes"}, {"per_replay": 1}])
def test_a_bad_spec_is_refused_naming_the_field(bad):
    with pytest.raises(InvalidInputError, match="spec"):
        BenchSpec.from_json(bad, "r.json")


def _raw(path):
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


@pytest.mark.parametrize("name", ["tests/data/bench/h200_samples.json", "cgtool/data/bench_h200.json.gz"])
def test_version_1_files_still_read(name):
    path = ROOT / name
    raw = _raw(path)
    assert raw["schema_version"] == 1 and all("spec" not in w for w in raw["workloads"].values())
    res = BenchResults.load(path)
    assert [w.key for w in res.workloads] == list(raw["workloads"])
    for w in res.workloads:
        r = raw["workloads"][w.key]
        assert w.spec is None  # not recorded: unknown, not a default
        assert w.sampling == r["sampling"] and w.extra["replays"] == r["replays"]
        assert w.extra["cold_cache"] == r["cold_cache"]
        assert (w.nodes, w.graphs, w.check_ok, w.max_abs_diff) == (r["nodes"], r["graphs"], r["check_ok"],
                                                                   r["max_abs_diff"])
        assert list(w.gpu_us) == r["gpu_us"] and w.capture_medians() == ()  # one process: one capture, no spread
        assert w.capture_spread() is None
        # the replay spread: this capture's interquartile range over its median, from the raw samples
        q = statistics.quantiles(r["gpu_us"], n=4, method="inclusive")
        assert w.replay_spread() == pytest.approx((q[2] - q[0]) / statistics.median(r["gpu_us"]))
    # written back, a version-1 result stays version 1 with the fields it had
    again = BenchResults.from_json(json.loads(json.dumps(res.to_json())), "again")
    assert again == res and res.to_json()["schema_version"] == 1


def test_a_mistyped_field_refuses_the_file_instead_of_dropping_the_row():
    for field, value in (("max_abs_diff", "0.0"), ("nodes", "400"), ("check_ok", "yes"), ("args", "--x"),
                         ("capture_medians_us", [1.0, "2"])):
        doc = {"kind": "bench", "schema_version": 2,
               "workloads": {"a": {"gpu_us": [1.0, 2.0], field: value}, "b": {"gpu_us": [1.0]}}}
        with pytest.raises(InvalidInputError, match=field):
            validate_results(doc, "r.json")


def test_capture_and_replay_spreads_from_the_samples():
    caps = [gen(100, seed=1), gen(103, seed=2), gen(101, seed=3)]
    w = WorkloadResult("w", gpu_us=tuple(x for c in caps for x in c),
                       capture_medians_us=tuple(statistics.median(c) for c in caps), spec=BenchSpec(recaptures=3))
    meds = [statistics.median(c) for c in caps]
    assert w.capture_spread() == pytest.approx((max(meds) - min(meds)) / statistics.median(meds))
    rel = []
    for c in caps:
        q = statistics.quantiles(c, n=4, method="inclusive")
        rel.append((q[2] - q[0]) / statistics.median(c))
    assert w.replay_spread() == pytest.approx(statistics.median(rel))
    assert capture_bound(w)  # captures 3 % apart, blocks within one 0.3 %


def _captures(medians, n=20, noise=0.0005, scale=1.0, seed=0):
    caps = [gen(m * scale, n, noise, seed + k) for k, m in enumerate(medians)]
    return WorkloadResult("w", gpu_us=tuple(x for c in caps for x in c), spec=BenchSpec(recaptures=len(medians)),
                          capture_medians_us=tuple(statistics.median(c) for c in caps))


def test_the_gate_compares_captures_when_they_spread_wider_than_replays():
    # four captures at 100 µs, one at 103: recapturing alone moves the step by 3 %
    old = _captures([100, 100, 100, 100, 103])
    shifted = _captures([100, 100, 100, 100, 103], scale=1.025, seed=50)
    blocks_alone = judge("w", old.gpu_us, shifted.gpu_us)
    assert blocks_alone.verdict is Verdict.REGRESSED  # the interquartile rule alone would fail the build
    j = judge_results("w", old, shifted)
    assert j.verdict is Verdict.UNCHANGED and "captures' ranges" in j.reason
    slower = _captures([100, 100, 100, 100, 103], scale=1.06, seed=90)
    assert judge_results("w", old, slower).verdict is Verdict.REGRESSED  # beyond what recapturing does
    # captures as tight as the blocks: the interquartile rule, exactly as without captures
    tight_old, tight_new = _captures([100, 100.01, 100]), _captures([100, 100.01, 100], scale=1.025, seed=7)
    assert not capture_bound(tight_old) and not capture_bound(tight_new)
    assert judge_results("w", tight_old, tight_new) == judge("w", tight_old.gpu_us, tight_new.gpu_us)
