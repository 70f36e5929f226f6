"""The pytest plugin (cgtool/pytest_plugin.py) on the CPU, through ``pytester``.

The inner sessions measure nothing: their conftest implements the plugin's hook
``pytest_cgtool_measure`` and returns the samples this file generated (``FAKE_CONFTEST``, reading
``fake.json``). What each inner test is given, what the saved file holds and what the gate decides
are checked against numpy and scipy on those samples, not against the plugin's own code."""

import gzip
import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from cgtool.artifacts.bench import BenchResults, BenchSpec

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
#: When cgtool is installed, its entry point loads the plugin in every session; otherwise it is named.
PLUGIN = [] if any(ep.value == "cgtool.pytest_plugin" for ep in entry_points(group="pytest11")) \
    else ["-p", "cgtool.pytest_plugin"]
ENV = {"device": "FakeGPU 80GB", "driver_version": "580.159.04", "cuda_driver": 13000, "torch": "2.11.0+cu130"}

FAKE_CONFTEST = '''
import json
from pathlib import Path

import pytest

from cgtool.artifacts.bench import WorkloadResult


@pytest.hookimpl
def pytest_cgtool_measure(step, spec, name, config):
    fake = json.loads(Path(config.rootpath, "fake.json").read_text())
    s = fake["samples"][name]
    if "error" in s:
        return WorkloadResult.failure(name, s["error"], 3)
    return WorkloadResult(workload=name, gpu_us=tuple(s["gpu_us"]), host_us=tuple(s["host_us"]),
                          eager_us=tuple(s["eager_us"]), spec=spec, capture_medians_us=(sorted(s["gpu_us"])[10],),
                          environment=fake["environment"], nodes=400, graphs=1, check_ok=True, max_abs_diff=0.0)
'''

#: Two tests; each writes what the fixture returned to returned/<test>.json.
BENCH_TESTS = '''
import json
from pathlib import Path


def _keep(name, r):
    Path("returned").mkdir(exist_ok=True)
    Path("returned", name + ".json").write_text(json.dumps({
        "median": r.median_us, "iqr": r.iqr_us, "host": r.host_us, "eager": r.eager_us, "speedup": r.speedup,
        "verdict": r.verdict, "replays": r.result.spec.replays}))


def test_chain(cgtool_bench):
    _keep("chain", cgtool_bench(lambda: None))


def test_mlp(cgtool_bench):
    _keep("mlp", cgtool_bench(lambda x: x, 3))


def test_plain():
    pass
'''
IDS = {"chain": "test_bench.py::test_chain", "mlp": "test_bench.py::test_mlp"}


def samples(median, seed, n=21, noise=0.003, scale=1.0):
    """GPU, host and eager samples (µs), generated here with numpy (n = 21 blocks: an odd count,
    so that the median is one of the samples)."""
    rng = np.random.default_rng(seed)
    gpu = median * scale * rng.lognormal(0, noise, n)
    return {"gpu_us": gpu.tolist(), "host_us": (5 + rng.random(50)).tolist(),
            "eager_us": (median * 4 * rng.lognormal(0, noise, n)).tolist()}


def setup_session(pytester, scale=1.0, env=ENV, seed=0, tests=BENCH_TESTS):
    fake = {"environment": env,
            "samples": {IDS["chain"]: samples(400.0, seed, scale=scale), IDS["mlp"]: samples(80.0, seed + 1, scale=scale)}}
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(test_bench=tests)
    (pytester.path / "fake.json").write_text(json.dumps(fake))
    return fake


def run(pytester, *args):
    return pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", "-p", "no:benchmark", *map(str, args))


def returned(pytester, name):
    return json.loads((pytester.path / "returned" / f"{name}.json").read_text())


def gate_expects_regression(old, new, max_regression=0.02):
    """The gate's three conditions on a pair of sample lists, from numpy and scipy."""
    mo, mn = np.median(old), np.median(new)
    p = mannwhitneyu(new, old, alternative="greater").pvalue
    gap = (np.percentile(new, 25) - np.percentile(old, 75)) / mo
    return bool(mn / mo > 1 + max_regression and p < 0.002 and gap >= 0.005)


@pytest.mark.subprocess
def test_the_plugin_module_imports_nothing_heavy():
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import pytest; import cgtool.pytest_plugin"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stderr
    mods = {line.rsplit("|", 1)[-1].strip() for line in out.splitlines() if line.startswith("import time:")}
    assert "cgtool.pytest_plugin" in mods
    heavy = sorted(m for m in mods if m.split(".")[0] in ("torch", "numpy", "msgspec", "rich", "typer", "networkx")
                   or m.startswith(("cgtool.capture", "cgtool.artifacts", "cgtool.inspect", "cgtool.report", "cgtool.cli")))
    assert heavy == []


@pytest.mark.subprocess
def test_a_session_that_does_not_use_it_imports_nothing_of_cgtool_beyond_it(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    pytester.makeconftest("import sys, json\n"
                          "def pytest_sessionfinish(session):\n"
                          "    open('mods.json', 'w').write(json.dumps(sorted(sys.modules)))\n")
    pytester.makepyfile(test_plain="def test_one():\n    assert True\n")
    r = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider")
    r.assert_outcomes(passed=1)
    mods = json.loads((pytester.path / "mods.json").read_text())
    assert "cgtool.pytest_plugin" in mods
    package = json.loads(subprocess.run(  # what `import cgtool` itself loads (its version module)
        [sys.executable, "-c", "import json, sys, cgtool; print(json.dumps([m for m in sys.modules if "
         "m.startswith('cgtool.')]))"], cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    assert [m for m in mods if m.startswith("cgtool.") and m not in {"cgtool.pytest_plugin", *package}] == []
    assert not [m for m in package if m.startswith(("cgtool.capture", "cgtool.artifacts", "cgtool.report"))]
    assert "torch" not in mods


def test_save_writes_every_result_in_the_bench_schema_and_returns_its_statistics(pytester, run_cli):
    fake = setup_session(pytester)
    r = run(pytester, "--cgtool-save", "out.json", "--cgtool-replays", "200", "--cgtool-blocks", "20")
    r.assert_outcomes(passed=3)
    saved = BenchResults.load(pytester.path / "out.json")
    assert {w.workload for w in saved.workloads} == set(IDS.values())
    for short, tid in IDS.items():
        w = saved.by_ident()[(tid, None)]
        s = fake["samples"][tid]
        assert list(w.gpu_us) == s["gpu_us"] and list(w.host_us) == s["host_us"]
        assert w.spec == BenchSpec(replays=200, blocks=20)
        got = returned(pytester, short)
        assert got["median"] == pytest.approx(np.median(s["gpu_us"]))
        q1, q3 = np.percentile(s["gpu_us"], [25, 75])
        assert got["iqr"] == pytest.approx(q3 - q1)
        assert got["host"] == pytest.approx(np.median(s["host_us"]))
        assert got["speedup"] == pytest.approx(np.median(s["eager_us"]) / np.median(s["gpu_us"]))
        assert got["verdict"] is None and got["replays"] == 200
    assert saved.environment == ENV
    # `cgtool bench --compare` and `cgtool report` read it
    code, out, err = run_cli("bench", "--compare", pytester.path / "out.json", pytester.path / "out.json")
    assert code == 0, err
    assert "test_bench.py::test_chain" in out and "performance gate passed" in out
    code, _, err = run_cli("report", pytester.path / "out.json", "-o", pytester.path / "r.html")
    assert code == 0, err
    assert "test_chain" in (pytester.path / "r.html").read_text()


def test_an_unchanged_rerun_passes_the_gate(pytester):
    fake = setup_session(pytester)
    run(pytester, "--cgtool-save", "base.json").assert_outcomes(passed=3)
    (pytester.path / "returned" / "chain.json").unlink()
    s = fake["samples"][IDS["chain"]]["gpu_us"]
    assert mannwhitneyu(s, s, alternative="greater").pvalue > 0.002 and not gate_expects_regression(s, s)
    r = run(pytester, "--cgtool-baseline", "base.json")
    r.assert_outcomes(passed=3)
    assert returned(pytester, "chain")["verdict"] == "unchanged"
    assert "performance gate: 0 of 2 judged regressed" in r.stdout.str()


@pytest.mark.parametrize("scale", [1.05, 1.10])
def test_a_slowdown_fails_its_test_with_the_verdict_table(pytester, scale):
    base = setup_session(pytester, seed=0)
    run(pytester, "--cgtool-save", "base.json").assert_outcomes(passed=3)
    new = setup_session(pytester, seed=10, scale=scale)
    for tid in IDS.values():
        assert gate_expects_regression(base["samples"][tid]["gpu_us"], new["samples"][tid]["gpu_us"])
    r = run(pytester, "--cgtool-baseline", "base.json", "--cgtool-save", "new.json")
    r.assert_outcomes(passed=1, failed=2)
    text = r.stdout.str()
    assert "performance gate failed: test_bench.py::test_chain regressed" in text
    assert "cgtool bench (GPU µs per replay)" in text and "regressed: median +" in text
    ratio = np.median(new["samples"][IDS["chain"]]["gpu_us"]) / np.median(base["samples"][IDS["chain"]]["gpu_us"])
    assert f"{100 * (ratio - 1):+.1f}% regressed" in text
    # the results of a failing run are still written, and `cgtool bench --compare` agrees
    assert {w.workload for w in BenchResults.load(pytester.path / "new.json").workloads} == set(IDS.values())


def test_a_slowdown_within_the_threshold_passes(pytester):
    base = setup_session(pytester, seed=0)
    run(pytester, "--cgtool-save", "base.json").assert_outcomes(passed=3)
    new = setup_session(pytester, seed=10, scale=1.05)
    old_s, new_s = base["samples"][IDS["chain"]]["gpu_us"], new["samples"][IDS["chain"]]["gpu_us"]
    assert not gate_expects_regression(old_s, new_s, max_regression=0.10)
    run(pytester, "--cgtool-baseline", "base.json", "--cgtool-max-regression", "10%").assert_outcomes(passed=3)


def test_a_baseline_from_another_environment_is_refused(pytester):
    setup_session(pytester)
    run(pytester, "--cgtool-save", "base.json").assert_outcomes(passed=3)
    setup_session(pytester, env={**ENV, "device": "FakeGPU 141GB"})
    r = run(pytester, "--cgtool-baseline", "base.json")
    r.assert_outcomes(passed=1, failed=2)
    assert "comes from another environment (device: 'FakeGPU 80GB' vs 'FakeGPU 141GB')" in r.stdout.str()
    assert "--cgtool-allow-env-mismatch" in r.stdout.str()
    run(pytester, "--cgtool-baseline", "base.json", "--cgtool-allow-env-mismatch").assert_outcomes(passed=3)


def test_a_baseline_written_by_cgtool_bench_gates_a_named_step(pytester):
    """`cgtool bench`'s own file (H200, chain.py) as the baseline: a test naming its step as the
    workload is judged against that workload."""
    doc = json.loads(gzip.decompress((ROOT / "cgtool/data/bench_h200.json.gz").read_bytes()))
    (pytester.path / "h200.json").write_text(json.dumps(doc))
    old = doc["workloads"]["sample_workloads/chain.py"]["gpu_us"]
    fake = {"environment": doc["environment"], "samples": {
        "sample_workloads/chain.py": {"gpu_us": [x * 1.2 for x in old], "host_us": [5.0], "eager_us": [900.0]}}}
    assert gate_expects_regression(old, fake["samples"]["sample_workloads/chain.py"]["gpu_us"])
    pytester.makeconftest(FAKE_CONFTEST)
    (pytester.path / "fake.json").write_text(json.dumps(fake))
    pytester.makepyfile(test_named="def test_chain(cgtool_bench):\n"
                                   "    cgtool_bench(lambda: None, name='sample_workloads/chain.py')\n")
    r = run(pytester, "--cgtool-baseline", "h200.json")
    r.assert_outcomes(failed=1)
    assert "performance gate failed: sample_workloads/chain.py regressed" in r.stdout.str()


def test_the_step_summary_gets_bench_table(pytester, monkeypatch):
    fake = setup_session(pytester)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    run(pytester, "--cgtool-save", "base.json").assert_outcomes(passed=3)
    run(pytester, "--cgtool-baseline", "base.json").assert_outcomes(passed=3)
    text = summary.read_text()
    assert text.count("### cgtool bench") == 2
    med = np.median(fake["samples"][IDS["chain"]]["gpu_us"])
    rows = [line for line in text.splitlines() if "test\\_chain" in line]  # markdown escapes _ ( ) +
    assert len(rows) == 2 and all(f" | {med:.2f} | " in row for row in rows)
    assert rows[0].endswith("| - |") and "unchanged \\(median \\+0.0% \\(within 2%\\)\\)" in rows[1]


def test_bad_options_are_usage_errors_before_any_test(pytester):
    setup_session(pytester)
    (pytester.path / "exists.json").write_text("{}")
    for args, words in [
        (["--cgtool-max-regression", "lots"], "--cgtool-max-regression takes a percentage"),
        (["--cgtool-save", "exists.json"], "will not overwrite without --cgtool-force: exists.json"),
        (["--cgtool-baseline", "exists.json"], "is not a cgtool bench result"),
        (["--cgtool-baseline", "nothere.json"], "nothere.json"),
        (["--cgtool-replays", "5", "--cgtool-blocks", "20"], "replays (5) must be at least blocks (20)"),
        (["--cgtool-replays", "0"], "replays is 0; it takes an integer of at least 1"),
        (["--cgtool-warmup", "-1"], "warmup is -1; it takes an integer of at least 0"),
    ]:
        r = run(pytester, *args)
        assert r.ret == pytest.ExitCode.USAGE_ERROR, args
        assert words in r.stderr.str(), (args, r.stderr.str())
        assert not (pytester.path / "returned").exists()


def test_a_second_call_with_the_same_name_fails(pytester):
    setup_session(pytester, tests="def test_twice(cgtool_bench):\n"
                                  "    cgtool_bench(lambda: None, name='test_bench.py::test_chain')\n"
                                  "    cgtool_bench(lambda: None, name='test_bench.py::test_chain')\n")
    r = run(pytester)
    r.assert_outcomes(failed=1)
    assert "called twice with the name 'test_bench.py::test_chain'" in r.stdout.str()


def _subprocess_env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


@pytest.mark.subprocess
def test_without_torch_the_test_skips_with_the_reason(pytester, monkeypatch):
    pytest.importorskip  # noqa: B018 (the check below is the point: this machine's python has no torch)
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip("torch is installed here: the no-torch skip is seen where it is not")
    _subprocess_env(monkeypatch)
    pytester.makepyfile(test_bench="def test_step(cgtool_bench):\n    cgtool_bench(lambda: None)\n")
    r = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "-rs")
    r.assert_outcomes(skipped=1)
    assert "cgtool_bench needs packages that are not installed: torch" in r.stdout.str()


@pytest.mark.subprocess
def test_without_a_gpu_the_test_skips_with_the_reason(pytester, monkeypatch):
    _subprocess_env(monkeypatch)
    pkg = pytester.mkpydir("torch")  # a CPU build of torch, as far as the plugin asks
    (pkg / "__init__.py").write_text("class cuda:\n    @staticmethod\n    def is_available():\n        return False\n"
                                     "class version:\n    cuda = None\n")
    pytester.makepyfile(test_bench="def test_step(cgtool_bench):\n    cgtool_bench(lambda: None)\n")
    r = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "-rs")
    r.assert_outcomes(skipped=1)
    assert "cgtool_bench needs a CUDA GPU, but this torch build has no CUDA support" in r.stdout.str()


@pytest.mark.subprocess
def test_xdist_is_refused(pytester):
    setup_session(pytester)
    r = run(pytester, "-n", "1", "--cgtool-save", "out.json")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "cannot run under pytest-xdist" in r.stderr.str()
    r = run(pytester, "-n", "1")
    r.assert_outcomes(passed=1, failed=2)
    assert "pytest-xdist runs tests in parallel worker processes" in r.stdout.str()
    # the marker leaves them out of a parallel run
    run(pytester, "-n", "1", "-m", "not cgtool_bench").assert_outcomes(passed=1)


RESULTS = ROOT / "benchmarks" / "results"
#: the run with the entry point (its A/A pairs cut short by its budget), and the 50-pair A/A run
RESULT, RESULT_AA = RESULTS / "bench_pytest_plugin_h200.json", RESULTS / "bench_pytest_plugin_aa50_h200.json"


def test_performance_figures_are_the_gpu_result_file():
    """docs/performance.md's and docs/pytest.md's figures of the plugin, recomputed from the raw
    medians and samples of the two H200 result files in benchmarks/results/; each A/A pair's exit
    status agrees with the gate's three conditions recomputed with numpy and scipy on the pair's
    samples, and the bound the docs give on the false-failure rate is the exact (Clopper-Pearson)
    one-sided 95 % bound for the pairs run."""
    from scipy.stats import beta

    perf = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    guide = " ".join((ROOT / "docs" / "pytest.md").read_text().split())
    d = json.loads(RESULT.read_text())
    assert d["entry_point"]["exit"] == 0 and "cgtool.pytest_plugin" in d["entry_point"]["entry_point_and_module"]
    for f in (RESULT, RESULT_AA):
        d = json.loads(f.read_text())
        assert f.name in perf and f.name in guide
        for part in ("fresh", "same_process"):
            fx, b = d[part]["fixture"], d[part]["bench"]
            ratio = np.median(fx) / np.median(b)
            assert abs(ratio - 1) < 0.01
            cells = f"| {', '.join(f'{v:.1f}' for v in fx)} | {', '.join(f'{v:.1f}' for v in b)} | {ratio:.4f} |"
            assert cells in perf, cells
            assert f"{ratio:.4f}x" in guide
        state = np.median(d["same_process"]["fixture"]) / np.median(d["fresh"]["fixture"])
        assert f"{round((state - 1) * 100)} % (run {1 if f is RESULT else 2})" in perf
    d = json.loads(RESULT_AA.read_text())
    pairs = d["aa"]["pairs"]
    judged = [p for p in pairs if p["baseline_exit"] == 0 and p["new_gpu_us"]]
    assert len(judged) == len(pairs) == d["aa"]["judged"] >= 50
    for p in judged:
        assert (p["gate_exit"] != 0) == gate_expects_regression(p["old_gpu_us"], p["new_gpu_us"])
    fails = sum(p["gate_exit"] != 0 for p in judged)
    assert fails == d["aa"]["false_failures"]
    assert f"{fails} false failures in {len(judged)} A/A pairs" in perf
    assert f"{fails} false failures in {len(judged)} A/A pairs" in guide
    if fails == 0:
        assert f"below {beta.ppf(0.95, 1, len(judged)) * 100:.1f} % (95 %, one-sided" in perf


def test_the_fixture_and_bench_share_one_timing_function(monkeypatch):
    """``bench_step`` (the fixture's) and ``bench_workload`` (bench's process) hand their capture to
    the same ``bench_captured`` with the same spec: the timing is written once."""
    from cgtool.capture import bench as capture_bench
    from cgtool.capture import runner

    calls = []
    monkeypatch.setattr(capture_bench, "require_cuda", lambda what: None)
    monkeypatch.setattr(runner, "warm_and_capture", lambda target, step: ("captured", step, target.spec))
    monkeypatch.setattr(runner, "capture_workload", lambda target, args, check: ("captured", target.spec, check))
    monkeypatch.setattr(capture_bench, "bench_captured", lambda first, spec, **kw: calls.append((first, spec, kw)))
    spec = BenchSpec(replays=300, blocks=10, recaptures=2)

    def step():
        return None

    capture_bench.bench_step(step, spec, name="t::x")
    capture_bench.bench_workload(str(ROOT / "sample_workloads/chain.py"), ["--kernels", "4"], spec)
    (first_a, spec_a, kw_a), (first_b, spec_b, kw_b) = calls
    assert first_a == ("captured", step, "t::x") and spec_a is spec and kw_a["workload"] == "t::x"
    assert first_b[2] is False and spec_b is spec and kw_b["args"] == ["--kernels", "4"]


def test_the_plugins_own_measurement_is_bench_step_with_the_sessions_spec(pytester, monkeypatch):
    from cgtool.artifacts.bench import WorkloadResult
    from cgtool.capture import _deps
    from cgtool.capture import bench as capture_bench

    seen = []

    def fake_bench_step(step, spec, *, name):
        seen.append((step(), spec, name))
        return WorkloadResult(workload=name, gpu_us=(1.0, 2.0, 3.0), spec=spec)

    monkeypatch.setattr(_deps, "require_cuda", lambda what: None)
    monkeypatch.setattr(capture_bench, "bench_step", fake_bench_step)
    pytester.makepyfile(test_bench="def test_step(cgtool_bench):\n"
                                   "    r = cgtool_bench(lambda a, b: a + b, 2, 3, warmup=7)\n"
                                   "    assert r.median_us == 2.0 and r.speedup is None\n")
    run(pytester, "--cgtool-replays", "400", "--cgtool-recaptures", "3").assert_outcomes(passed=1)
    assert seen == [(5, BenchSpec(replays=400, warmup=7, recaptures=3), "test_bench.py::test_step")]


def test_a_step_that_fails_to_capture_fails_its_test_and_is_saved_as_failed(pytester):
    fake = setup_session(pytester)
    fake["samples"][IDS["mlp"]] = {"error": "capture failed: sync-in-capture at test_bench.py:22"}
    (pytester.path / "fake.json").write_text(json.dumps(fake))
    r = run(pytester, "--cgtool-save", "out.json")
    r.assert_outcomes(passed=2, failed=1)
    assert "test_bench.py::test_mlp: capture failed: sync-in-capture at test_bench.py:22" in r.stdout.str()
    doc = json.loads((pytester.path / "out.json").read_text())
    assert doc["workloads"][IDS["mlp"]] == {"workload": IDS["mlp"], "error": fake["samples"][IDS["mlp"]]["error"],
                                            "exit_code": 3}


def test_a_save_with_nothing_timed_writes_nothing_and_says_so(pytester):
    setup_session(pytester)
    r = run(pytester, "--cgtool-save", "out.json", "-k", "plain")
    r.assert_outcomes(passed=1)
    assert "cgtool: no test called cgtool_bench; out.json was not written" in r.stdout.str()
    assert not (pytester.path / "out.json").exists()


def test_a_bad_override_fails_its_test(pytester):
    setup_session(pytester, tests="def test_chain(cgtool_bench):\n"
                                  "    cgtool_bench(lambda: None, replays=10, blocks=50)\n")
    r = run(pytester)
    r.assert_outcomes(failed=1)
    assert "replays (10) must be at least blocks (50)" in r.stdout.str()
