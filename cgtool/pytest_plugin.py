"""The pytest plugin ``cgtool`` (entry point ``pytest11``): CUDA-graph perf gates in a test suite.

A test asks for the fixture ``cgtool_bench`` and calls it with its step::

    def test_decode_step(cgtool_bench):
        x = torch.ones(1024, device="cuda")
        r = cgtool_bench(lambda: (x * 2).sum())
        assert r.speedup is None or r.speedup > 1

The step is warmed up, captured and its replays timed by the code ``cgtool bench`` runs in each of
its processes (``cgtool.capture.bench.bench_step``: the same ``BenchSpec``, samples and
recaptures), in the test's own process. ``--cgtool-save`` writes every result in the bench JSON
schema (one workload per test id), ``--cgtool-baseline`` judges each one as ``bench --baseline``
does (``inspect.benchstats``); a regression fails its test with the verdict table. docs/pytest.md
is the user's page.

This module is loaded by every pytest session of an environment where cgtool is installed, so it
imports nothing at import time beyond pytest and the standard library: cgtool's artifacts, gate
and renderers are imported when an option of the plugin is given or the fixture is used, and torch
only when the fixture measures.

The measuring is the hook ``pytest_cgtool_measure`` (first result wins; this module's own
implementation, the real GPU timing, runs last). A ``conftest.py`` may implement it to return a
``WorkloadResult`` of fake samples: the plugin's own tests (tests/test_pytest_plugin.py) do, to run
saving, gating and refusals on a machine without a GPU.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pytest

if TYPE_CHECKING:
    from cgtool.artifacts.bench import BenchResults, BenchSpec, WorkloadResult
    from cgtool.inspect.benchstats import Judgement

#: Default of ``--cgtool-max-regression`` (``cgtool bench --max-regression``'s).
DEFAULT_MAX_REGRESSION = "2%"
#: Widest the verdict table may be (in a failing test's message and the terminal summary): a test
#: id is longer than a script's name, and a table folded into a terminal's width breaks the numbers
#: and verdicts that a CI log is read for. Rich makes it no wider than its cells need.
TABLE_WIDTH = 160
_WHY_SERIAL = ("cgtool_bench times a CUDA graph on the GPU, and pytest-xdist runs tests in parallel worker processes "
               "that share that GPU: the timings would measure the other workers' work, not this step.")


class CgtoolHookSpecs:
    """The plugin's hook (registered by ``pytest_addhooks``)."""

    @pytest.hookspec(firstresult=True)
    def pytest_cgtool_measure(self, step: Callable[[], Any], spec: BenchSpec, name: str,
                              config: pytest.Config) -> WorkloadResult | None:
        """Measure ``step`` as ``spec`` says and return its ``cgtool.artifacts.bench.WorkloadResult``
        (workload ``name``), or None to leave it to the next implementation. The plugin's own
        implementation runs last: it warms up, captures and times the step on the GPU
        (``cgtool.capture.bench.bench_step``), and skips the test without torch or a CUDA device."""
        raise NotImplementedError  # a specification; pluggy never calls it


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(CgtoolHookSpecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("cgtool", "CUDA-graph timing with cgtool (fixture cgtool_bench; docs/pytest.md)")
    g.addoption("--cgtool-save", metavar="PATH", default=None,
                help="Write every cgtool_bench result to PATH in cgtool bench's JSON schema, one workload per test "
                     "id (read by `cgtool bench --compare` and `cgtool report`).")
    g.addoption("--cgtool-baseline", metavar="PATH", default=None,
                help="Judge every cgtool_bench result against PATH (a --cgtool-save or `cgtool bench "
                     "--save-baseline` file) as `cgtool bench --baseline` does; a regression fails its test.")
    g.addoption("--cgtool-max-regression", metavar="PCT", default=DEFAULT_MAX_REGRESSION,
                help="Median slowdown tolerated before the significance test may fail the gate (default: "
                     "%(default)s).")
    g.addoption("--cgtool-allow-env-mismatch", action="store_true", default=False,
                help="Compare with a baseline from another GPU, driver or torch anyway.")
    g.addoption("--cgtool-force", action="store_true", default=False,
                help="Overwrite the --cgtool-save file if it exists.")
    g.addoption("--cgtool-replays", metavar="N", type=int, default=None,
                help="Timed replays per capture (cgtool bench --replays; default 1000).")
    g.addoption("--cgtool-blocks", metavar="N", type=int, default=None,
                help="Timed blocks per capture, one sample each (default 20).")
    g.addoption("--cgtool-warmup", metavar="N", type=int, default=None,
                help="Untimed replays before each capture's timing (default 20).")
    g.addoption("--cgtool-recaptures", metavar="K", type=int, default=None,
                help="Captures of the step per test, each timed, in other allocator states (default 1).")
    g.addoption("--cgtool-no-eager", action="store_true", default=False,
                help="Skip the eager baseline (no speedup).")


@dataclass
class _Run:
    """What the session's cgtool_bench calls produced, and what the options asked for."""

    save: Path | None
    baseline_path: Path | None
    baseline: BenchResults | None
    max_regression: float
    allow_env_mismatch: bool
    spec: BenchSpec
    results: list[WorkloadResult] = field(default_factory=list)
    judgements: list[Judgement] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


_RUN = pytest.StashKey[_Run]()


def _in_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _xdist_parallel(config: pytest.Config) -> bool:
    """The controller of a pytest-xdist session (``-n N`` with N > 0, or ``--dist`` other than no)."""
    if not config.pluginmanager.hasplugin("xdist") or _in_xdist_worker(config):
        return False
    n = config.getoption("numprocesses", None)
    return bool(n) or config.getoption("dist", "no") != "no"


def _uses_plugin(config: pytest.Config) -> bool:
    """An option of the plugin was given (a value other than its default)."""
    o = config.option
    given = [getattr(o, k, None) for k in ("cgtool_save", "cgtool_baseline", "cgtool_allow_env_mismatch",
                                            "cgtool_force", "cgtool_replays", "cgtool_blocks", "cgtool_warmup",
                                            "cgtool_recaptures", "cgtool_no_eager")]
    return any(v is not None and v is not False for v in given) or \
        getattr(o, "cgtool_max_regression", DEFAULT_MAX_REGRESSION) != DEFAULT_MAX_REGRESSION


def _spec(config: pytest.Config, **overrides: Any) -> BenchSpec:
    """The session's ``BenchSpec`` (options over cgtool bench's defaults), with a test's overrides."""
    from cgtool.artifacts.bench import BenchSpec

    o = config.option
    kw: dict[str, Any] = {k: v for k, v in (("replays", o.cgtool_replays), ("blocks", o.cgtool_blocks),
                                            ("warmup", o.cgtool_warmup), ("recaptures", o.cgtool_recaptures))
                          if v is not None}
    if o.cgtool_no_eager:
        kw["eager"] = False
    kw.update({k: v for k, v in overrides.items() if v is not None})
    for name, lo in (("replays", 1), ("blocks", 1), ("warmup", 0), ("recaptures", 1)):
        v = kw.get(name, getattr(BenchSpec, name))
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise ValueError(f"cgtool_bench: {name} is {v!r}; it takes an integer of at least {lo} "
                             f"(--cgtool-{name}, or the fixture's {name}= argument).")
    spec = BenchSpec(**kw)
    if spec.replays < spec.blocks:
        raise ValueError(f"cgtool_bench: replays ({spec.replays}) must be at least blocks ({spec.blocks}): each "
                         "block is one sample of at least one replay. Raise --cgtool-replays or lower --cgtool-blocks.")
    return spec


def pytest_configure(config: pytest.Config) -> None:
    """Check the options before any test runs (a bad baseline, an existing output, parallel
    workers), so that no GPU time is spent on a run whose results could not be used."""
    config.addinivalue_line("markers", "cgtool_bench: the test times a CUDA graph (fixture cgtool_bench)")
    if not _uses_plugin(config):
        return
    from cgtool.artifacts.bench import BenchResults
    from cgtool.errors import CgtoolError
    from cgtool.inspect.benchstats import parse_percent

    o = config.option
    save = Path(o.cgtool_save) if o.cgtool_save else None
    base = Path(o.cgtool_baseline) if o.cgtool_baseline else None
    if _xdist_parallel(config) and (save or base):
        raise pytest.UsageError(
            f"--cgtool-save and --cgtool-baseline cannot run under pytest-xdist (-n/--dist): {_WHY_SERIAL} Run the "
            "tests that use cgtool_bench in a pytest run of their own without -n (e.g. `pytest -p no:xdist -m "
            "cgtool_bench ...`), and the rest of the suite with -n.")
    try:
        max_regression = parse_percent(o.cgtool_max_regression)
        spec = _spec(config)
        baseline = BenchResults.load(base) if base is not None else None
        if save is not None and not _in_xdist_worker(config):
            _check_output(save, base, o.cgtool_force)
    except (CgtoolError, ValueError) as e:
        raise pytest.UsageError(str(e).replace("--max-regression", "--cgtool-max-regression")) from None
    config.stash[_RUN] = _Run(save, base, baseline, max_regression, o.cgtool_allow_env_mismatch, spec)


def _check_output(save: Path, baseline: Path | None, force: bool) -> None:
    """``cgtool bench``'s rule for an output: never an input, an existing file only with --cgtool-force."""
    from cgtool.cli._common import output_path
    from cgtool.errors import OutputExistsError, UsageError

    if str(save) == "-":
        raise UsageError("--cgtool-save takes a file name; standard output belongs to pytest.")
    try:
        output_path(save, force, inputs=(baseline,))
    except OutputExistsError:
        raise UsageError(f"File already exists, will not overwrite without --cgtool-force: {save}") from None


def _run(config: pytest.Config) -> _Run:
    """The session's state, made with the defaults when no option of the plugin was given."""
    if _RUN not in config.stash:
        from cgtool.inspect.benchstats import parse_percent

        config.stash[_RUN] = _Run(None, None, None, parse_percent(DEFAULT_MAX_REGRESSION), False, _spec(config))
    return config.stash[_RUN]


@dataclass(frozen=True)
class StepBench:
    """What ``cgtool_bench`` returns: the result as ``cgtool bench`` stores it (``result``: every
    sample) and the gate's judgement (None without ``--cgtool-baseline``). All times in µs."""

    result: WorkloadResult
    judgement: Judgement | None = None

    @property
    def name(self) -> str:
        return self.result.key

    @property
    def median_us(self) -> float:
        """GPU time per replay: the median of the samples (every capture's)."""
        return self.result.stats().median

    @property
    def iqr_us(self) -> float:
        return self.result.stats().iqr

    @property
    def replay_spread(self) -> float | None:
        """Between-replay spread: one capture's IQR over its median (median over captures)."""
        return self.result.replay_spread()

    @property
    def capture_spread(self) -> float | None:
        """Between-capture spread ((largest − smallest) / median of the captures' medians); None
        with one capture (``recaptures=1``)."""
        return self.result.capture_spread()

    @property
    def host_us(self) -> float | None:
        """CPU time of one ``replay()`` call (median), the host launch cost."""
        return self.result.host_median()

    @property
    def eager_us(self) -> float | None:
        """The step without the graph (median); None when not timed."""
        return self.result.eager_median()

    @property
    def speedup(self) -> float | None:
        """Eager time over replay time; None when the eager step was not timed."""
        e = self.eager_us
        return e / self.median_us if e is not None and self.median_us > 0 else None

    @property
    def verdict(self) -> str | None:
        """The gate's verdict (``regressed``, ``improved``, ``unchanged``, ``new``), or None."""
        return None if self.judgement is None else self.judgement.verdict.value


class CgtoolBench:
    """The ``cgtool_bench`` fixture's value: call it with the step (and its static inputs)."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._config = request.config
        self._nodeid = request.node.nodeid

    def __call__(self, step: Callable[..., Any], *inputs: Any, name: str | None = None, replays: int | None = None,
                 blocks: int | None = None, warmup: int | None = None, recaptures: int | None = None,
                 eager: bool | None = None) -> StepBench:
        """Warm up ``step(*inputs)``, capture it into a CUDA graph and time its replays as ``cgtool
        bench`` does; judge the result against ``--cgtool-baseline``. ``name`` labels the result
        (default: the test id; give one per call when a test times several steps, or a ``cgtool
        bench`` workload's name to gate against a baseline ``cgtool bench`` wrote); the keyword
        arguments override the session's ``--cgtool-*`` options for this call."""
        if _in_xdist_worker(self._config):
            pytest.fail(f"{_WHY_SERIAL} Run the tests that use cgtool_bench without -n (e.g. `pytest -p no:xdist "
                        "-m cgtool_bench ...`).", pytrace=False)
        run = _run(self._config)
        key = name or self._nodeid
        if key in {r.workload for r in run.results}:
            pytest.fail(f"cgtool_bench was called twice with the name {key!r}: each result needs its own name in "
                        "the results file. Pass name=... to each call.", pytrace=False)
        try:
            spec = _spec(self._config, replays=replays, blocks=blocks, warmup=warmup, recaptures=recaptures,
                         eager=eager)
        except ValueError as e:
            pytest.fail(str(e), pytrace=False)
        fn = functools.partial(step, *inputs) if inputs else step
        got = self._config.hook.pytest_cgtool_measure(step=fn, spec=spec, name=key, config=self._config)
        res = _as_result(got, key)
        if res.failed:
            run.results.append(res)
            pytest.fail(f"{key}: {res.error}", pytrace=False)
        run.results.append(res)
        judgement = _judge(run, res)
        return StepBench(res, judgement)


def _as_result(got: Any, key: str) -> WorkloadResult:
    from cgtool.artifacts.bench import WorkloadResult

    if not isinstance(got, WorkloadResult):
        raise TypeError(f"pytest_cgtool_measure returned {type(got).__name__}, not a WorkloadResult")
    return got if got.workload == key and got.rank is None else replace(got, workload=key, rank=None)


def _judge(run: _Run, res: WorkloadResult) -> Judgement | None:
    """``res`` against its entry in the baseline: the gate of ``cgtool bench --baseline``, its
    environment check first. A regression fails the test with the verdict table."""
    if run.baseline is None:
        return None
    from cgtool.artifacts.bench import BenchResults
    from cgtool.errors import UsageError
    from cgtool.inspect.benchstats import Verdict, compare_results, refuse_env_mismatch

    new = BenchResults.of([res])
    if not run.allow_env_mismatch:
        try:
            refuse_env_mismatch(run.baseline, new, run.baseline_path, flag="--cgtool-allow-env-mismatch")
        except UsageError as e:
            run.refused.append(res.key)
            pytest.fail(str(e), pytrace=False)
    old = BenchResults(tuple(w for w in run.baseline.workloads if w.ident == res.ident), run.baseline.environment)
    (j,) = compare_results(old, new, max_regression=run.max_regression)
    run.judgements.append(j)
    if j.verdict is Verdict.REGRESSED:
        pytest.fail(f"performance gate failed: {j.name} {j.verdict.value} ({j.reason})\n\n"
                    + verdict_text(new, [j]), pytrace=False)
    return j


def verdict_text(res: BenchResults, judgements: list[Judgement] | None, width: int = TABLE_WIDTH) -> str:
    """The bench table (and the verdicts under it) as ``cgtool bench`` prints them, without colour."""
    import io

    from rich.console import Console

    from cgtool.report.tables import bench_table, bench_verdicts, show

    buf = io.StringIO()
    con = Console(file=buf, width=width, color_system=None, force_terminal=False, highlight=False)
    show(con, bench_table(res, judgements))
    if judgements:
        bench_verdicts(con, res, judgements)
    return buf.getvalue().rstrip()


@pytest.hookimpl(trylast=True)
def pytest_cgtool_measure(step: Callable[[], Any], spec: BenchSpec, name: str,
                          config: pytest.Config) -> WorkloadResult:
    """The real measurement: ``cgtool bench``'s timing of one step in this process."""
    from cgtool.capture._deps import require_cuda
    from cgtool.errors import CgtoolError

    try:
        require_cuda("cgtool_bench")
    except CgtoolError as e:
        pytest.skip(e.message)
    from cgtool.capture.bench import bench_step
    from cgtool.capture.child import error_result

    try:
        return bench_step(step, spec, name=name)
    except CgtoolError as e:
        from cgtool.artifacts.bench import WorkloadResult

        return WorkloadResult.from_json(name, {"workload": name, **error_result(e)}, "cgtool_bench")


@pytest.fixture
def cgtool_bench(request: pytest.FixtureRequest) -> CgtoolBench:
    """Time a step as a CUDA graph: ``cgtool_bench(step, *inputs)`` returns a ``StepBench``
    (median, spreads, host launch cost, eager speedup). docs/pytest.md."""
    return CgtoolBench(request)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that uses the fixture ``cgtool_bench``, so that ``-m cgtool_bench`` selects them
    (and ``-m "not cgtool_bench"`` leaves them out of a parallel run)."""
    for item in items:
        if "cgtool_bench" in getattr(item, "fixturenames", ()):
            item.add_marker("cgtool_bench")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if _RUN not in config.stash:
        return
    run = config.stash[_RUN]
    if not run.results:
        if run.save is not None and not _in_xdist_worker(config):
            terminalreporter.write_line(f"cgtool: no test called cgtool_bench; {run.save} was not written")
        return
    from cgtool.artifacts.bench import BenchResults

    terminalreporter.section("cgtool bench")
    terminalreporter.write_line(verdict_text(BenchResults.of(run.results), run.judgements or None))
    if run.baseline is not None:
        from cgtool.inspect.benchstats import Verdict

        bad = [j for j in run.judgements if j.verdict is Verdict.REGRESSED]
        terminalreporter.write_line(
            f"performance gate: {len(bad)} of {len(run.judgements)} judged regressed"
            + (f"; {len(run.refused)} refused (another environment)" if run.refused else ""))
    if run.save is not None:
        terminalreporter.write_line(f"wrote {run.save}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write the results (``--cgtool-save``) and the step summary of a CI job."""
    config = session.config
    if _RUN not in config.stash or not config.stash[_RUN].results:
        return
    run = config.stash[_RUN]
    from cgtool.artifacts.bench import BenchResults
    from cgtool.report.summary_md import append_step_summary
    from cgtool.report.tables import bench_summary_md

    res = BenchResults.of(run.results)
    if run.save is not None:
        res.save(run.save, force=config.option.cgtool_force)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        append_step_summary(lambda: bench_summary_md(res, run.judgements or None))
