"""Bench results: the typed artifact ``cgtool bench --json`` writes and ``--baseline`` reads.

A result file holds, per workload, every raw sample (µs per replay, one per timed block), each
capture's median, the host-side launch cost samples, the eager samples, the ``BenchSpec`` that says
how they were taken and the environment fingerprint, so any statistic can be recomputed. On disk
(schema version 2)::

    {"kind": "bench", "schema_version": 2, "environment": {...},
     "workloads": {"<key>": {"workload": "chain.py", "rank": 0, "spec": {"replays": 1000, ...},
                             "gpu_us": [...], "capture_medians_us": [...], ...}}}

Version 1 files (no ``spec``: a ``"sampling": "blocks of 50"`` string and ``replays``/``cold_cache``
beside the samples, one capture per process) are still read: their spec is unknown (``None``) and
those fields are kept as written in ``extra``.

The key is only a unique label (``"<workload>"``, or ``"<workload> [rank <r>]"`` under torchrun);
the rank is the ``rank`` field. Files written before the field existed are read by taking the rank
from the key, once, here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from cgtool.artifacts.jsonio import DEFAULT_MAX_BYTES, load_json, write_json
from cgtool.errors import InvalidInputError, UsageError
from cgtool.text import short_value

BENCH_SCHEMA_VERSION = 2
#: A workload whose interquartile range exceeds this share of its median is flagged noisy.
NOISY_IQR = 0.10
#: Fingerprint fields that must match for a comparison (unless --allow-env-mismatch).
ENV_KEYS = ("device", "driver_version", "cuda_driver", "torch")

_RANK_KEY = re.compile(r"^(?P<spec>.*) \[rank (?P<rank>\d+)\]$")
#: Fields with a typed attribute; anything else a result carries travels in ``extra``.
_TYPED = {"workload", "rank", "gpu_us", "host_us", "eager_us", "error", "exit_code", "diagnosis",
          "clock_mhz", "runs", "run_medians_us", "environment", "spec", "capture_medians_us", "args", "nodes",
          "graphs", "check_ok", "max_abs_diff"}
#: Largest replay, block, warm-up and recapture counts a spec may hold (a damaged file is refused).
_SPEC_MAX = 1 << 40


def quantile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default method)."""
    s = sorted(xs)
    if not s:
        return float("nan")
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass(frozen=True)
class Stats:
    """Order statistics of a list of samples (µs)."""

    median: float
    q1: float
    q3: float
    min: float
    p90: float
    p99: float
    n: int

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def noisy(self) -> bool:
        return self.median > 0 and self.iqr / self.median > NOISY_IQR

    @classmethod
    def of(cls, xs: Sequence[float]) -> "Stats":
        return cls(quantile(xs, 0.5), quantile(xs, 0.25), quantile(xs, 0.75), min(xs) if xs else float("nan"),
                   quantile(xs, 0.9), quantile(xs, 0.99), len(xs))


@dataclass(frozen=True)
class BenchSpec:
    """What one ``cgtool bench`` run measures: the same for every workload and process of the run,
    sent to each bench process and stored with its results (as ``torch.utils.benchmark``'s
    ``TaskSpec``)."""

    #: Timed replays per capture.
    replays: int = 1000
    #: Timed blocks per capture, one sample (µs per replay) each; replays are split as evenly as possible.
    blocks: int = 20
    #: Untimed replays before each capture's timing.
    warmup: int = 20
    #: One CUDA event pair around every replay: a latency distribution (inflates small graphs).
    per_replay: bool = False
    #: L2 flushed before every replay (needs an event pair per replay).
    cold_cache: bool = False
    #: Captures of the step per process, each in another allocator state (``capture.bench``).
    recaptures: int = 1
    #: Also time the step without the graph.
    eager: bool = True

    @property
    def per_replay_events(self) -> bool:
        """The GPU samples are one per replay (``per_replay`` or ``cold_cache``), not one per block."""
        return self.per_replay or self.cold_cache

    def block_sizes(self) -> list[int]:
        """Replays in each timed block: ``replays`` split into ``blocks`` parts differing by at most one."""
        n = max(1, min(self.blocks, self.replays))
        q, r = divmod(self.replays, n)
        return [q + 1 if k < r else q for k in range(n)]

    @property
    def sampling(self) -> str:
        """How the GPU samples were taken, in words (``"blocks of 50"``, ``"per-replay"``)."""
        if self.per_replay_events:
            return "per-replay"
        sizes = self.block_sizes()
        return f"blocks of {sizes[0]}" if sizes[0] == sizes[-1] else f"blocks of {sizes[-1]}-{sizes[0]}"

    def to_json(self) -> dict[str, Any]:
        return {"replays": self.replays, "blocks": self.blocks, "warmup": self.warmup, "per_replay": self.per_replay,
                "cold_cache": self.cold_cache, "recaptures": self.recaptures, "eager": self.eager}

    @classmethod
    def from_json(cls, d: Any, source: str) -> "BenchSpec":
        """A spec from a result file or a bench process's request; anything else is refused, naming the field."""
        if not isinstance(d, dict):
            raise InvalidInputError(f"{source}: spec should be an object, not {_short(d)}.")
        kw: dict[str, Any] = {}
        for name, lo in (("replays", 1), ("blocks", 1), ("warmup", 0), ("recaptures", 1)):
            v = d.get(name, getattr(cls, name))
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= _SPEC_MAX:
                raise InvalidInputError(f"{source}: spec.{name} is {_short(v)}; expected an integer from {lo} "
                                        f"to {_SPEC_MAX}.")
            kw[name] = v
        for name in ("per_replay", "cold_cache", "eager"):
            v = d.get(name, getattr(cls, name))
            if not isinstance(v, bool):
                raise InvalidInputError(f"{source}: spec.{name} is {_short(v)}; expected true or false.")
            kw[name] = v
        return cls(**kw)


@dataclass(frozen=True)
class WorkloadResult:
    """The measurement of one workload (on one rank): raw samples, or the error that stopped it."""

    workload: str
    rank: int | None = None
    #: µs per replay: one sample per timed block (or per replay), every capture's in capture order.
    gpu_us: tuple[float, ...] = ()
    host_us: tuple[float, ...] = ()
    eager_us: tuple[float, ...] | None = None
    #: How the samples were taken; None for a version-1 file (its ``sampling`` string is in ``extra``).
    spec: BenchSpec | None = None
    #: Each capture's median GPU µs, in order (``--runs`` processes times ``--recaptures`` captures).
    capture_medians_us: tuple[float, ...] = ()
    clock_mhz: tuple[int | None, ...] = ()
    #: Fresh processes pooled into this result, and each one's median GPU µs.
    runs: int = 1
    run_medians_us: tuple[float, ...] = ()
    environment: Mapping[str, Any] = field(default_factory=dict)
    #: The workload's arguments, its graphs and their nodes (of the first capture).
    args: tuple[str, ...] = ()
    nodes: int | None = None
    graphs: int | None = None
    #: The replay-vs-eager check: passed or not (None: not run), and the largest difference.
    check_ok: bool | None = None
    max_abs_diff: float | None = None
    error: str | None = None
    exit_code: int | None = None
    diagnosis: Mapping[str, Any] | None = None
    #: Fields this version does not know (and a version-1 file's sampling, replays, cold_cache), as written.
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The label of this result in a file and in tables."""
        return self.workload if self.rank is None else f"{self.workload} [rank {self.rank}]"

    @property
    def ident(self) -> tuple[str, int | None]:
        """What a baseline is matched on: the workload and the rank."""
        return (self.workload, self.rank)

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def sampling(self) -> str:
        """How the GPU samples were taken, in words ("blocks of 50", "per-replay"); "" when unknown."""
        if self.spec is not None:
            return self.spec.sampling
        v = self.extra.get("sampling")
        return v if isinstance(v, str) else ""

    def stats(self) -> Stats:
        return Stats.of(self.gpu_us)

    def host_median(self) -> float | None:
        return Stats.of(self.host_us).median if self.host_us else None

    def eager_median(self) -> float | None:
        return Stats.of(self.eager_us).median if self.eager_us else None

    def capture_medians(self) -> tuple[float, ...]:
        """Each capture's median GPU µs. A file without them had one capture per process: the
        processes' medians (none for a single process)."""
        return self.capture_medians_us or self.run_medians_us

    def per_capture(self) -> list[tuple[float, ...]]:
        """The GPU samples split by capture (every capture of a run takes as many); empty when the
        samples do not split evenly over the captures."""
        n = len(self.capture_medians()) or 1
        if not self.gpu_us or len(self.gpu_us) % n:
            return []
        k = len(self.gpu_us) // n
        return [self.gpu_us[i * k:(i + 1) * k] for i in range(n)]

    def capture_spread(self) -> float | None:
        """Between-capture spread: (largest − smallest) / median of the captures' medians. None
        with fewer than two captures."""
        cm = self.capture_medians()
        if len(cm) < 2:
            return None
        med = Stats.of(cm).median
        return (max(cm) - min(cm)) / med if med > 0 else None

    def replay_spread(self) -> float | None:
        """Between-replay spread: the interquartile range of one capture's samples over their median
        (the median over captures). None when the samples cannot be split by capture."""
        rel = [s.iqr / s.median for s in map(Stats.of, self.per_capture()) if s.median > 0]
        return Stats.of(rel).median if rel else None

    @classmethod
    def failure(cls, workload: str, message: str, exit_code: int, *, rank: int | None = None,
                diagnosis: Mapping[str, Any] | None = None) -> "WorkloadResult":
        return cls(workload, rank, error=message, exit_code=exit_code, diagnosis=diagnosis)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"workload": self.workload}
        if self.rank is not None:
            d["rank"] = self.rank
        if self.failed:
            d.update(error=self.error, exit_code=self.exit_code)
            if self.diagnosis is not None:
                d["diagnosis"] = dict(self.diagnosis)
            return d
        if self.spec is not None:
            d["spec"] = self.spec.to_json()
        d.update(gpu_us=list(self.gpu_us), host_us=list(self.host_us),
                 eager_us=None if self.eager_us is None else list(self.eager_us))
        if self.capture_medians_us:
            d["capture_medians_us"] = list(self.capture_medians_us)
        d.update(self.extra)
        d.update(args=list(self.args), nodes=self.nodes, graphs=self.graphs, check_ok=self.check_ok,
                 max_abs_diff=self.max_abs_diff)
        d.update(clock_mhz=list(self.clock_mhz), environment=dict(self.environment))
        if self.runs != 1 or self.run_medians_us:
            d.update(runs=self.runs, run_medians_us=list(self.run_medians_us))
        return d

    @classmethod
    def from_json(cls, key: str, w: Any, source: str) -> "WorkloadResult":
        if not isinstance(w, dict):
            raise InvalidInputError(f"{source}: workload {key!r} should be an object.")
        m = _RANK_KEY.match(key)
        workload = w.get("workload") if isinstance(w.get("workload"), str) else (m["spec"] if m else key)
        rank = w.get("rank")
        if rank is None and m:
            rank = int(m["rank"])  # files written before the rank field
        if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < 1 << 31):
            raise InvalidInputError(f"{source}: workloads[{key!r}].rank is {_short(rank)}; expected an integer "
                                    "from 0 to 2^31-1.")
        for name, types in (("environment", dict), ("diagnosis", dict), ("clock_mhz", list), ("sampling", str)):
            if w.get(name) is not None and not isinstance(w[name], types):
                raise InvalidInputError(f"{source}: workloads[{key!r}].{name} should be "
                                        f"{'an object' if types is dict else 'a list' if types is list else 'a string'}, "
                                        f"not {_short(w[name])}.")
        runs = w.get("runs", 1)
        if not isinstance(runs, int) or isinstance(runs, bool) or not 1 <= runs <= 1_000_000:
            raise InvalidInputError(f"{source}: workloads[{key!r}].runs is {_short(runs)}; expected an integer "
                                    "from 1 to 1000000.")
        if w.get("error"):
            code = w.get("exit_code", 3)
            if not isinstance(code, int) or isinstance(code, bool) or not 0 <= code < 256:
                raise InvalidInputError(f"{source}: workloads[{key!r}].exit_code is {_short(code)}; expected an "
                                        "exit status from 0 to 255.")
            return cls.failure(str(workload), str(w["error"]), code or 3, rank=rank,
                               diagnosis=w.get("diagnosis") if isinstance(w.get("diagnosis"), dict) else None)
        return cls(
            workload=str(workload), rank=rank,
            gpu_us=_samples(w.get("gpu_us"), source, key, "gpu_us", required=True),
            host_us=_samples(w.get("host_us"), source, key, "host_us"),
            eager_us=_samples(w.get("eager_us"), source, key, "eager_us") or None,
            spec=None if w.get("spec") is None else BenchSpec.from_json(w["spec"], f"{source}: workloads[{key!r}]"),
            capture_medians_us=_samples(w.get("capture_medians_us"), source, key, "capture_medians_us"),
            clock_mhz=tuple(c if isinstance(c, int) and not isinstance(c, bool) else None
                            for c in (w.get("clock_mhz") or []) if isinstance(w.get("clock_mhz"), list)),
            runs=runs,
            run_medians_us=_samples(w.get("run_medians_us"), source, key, "run_medians_us"),
            environment=w["environment"] if isinstance(w.get("environment"), dict) else {},
            **_described(w, source, key),
            extra={k: v for k, v in w.items() if k not in _TYPED},
        )


def _described(w: Mapping[str, Any], source: str, key: str) -> dict[str, Any]:
    """The typed fields that describe a workload's capture (args, nodes, graphs, check); a value
    of the wrong type is refused, naming the field, never dropped."""
    where = f"{source}: workloads[{key!r}]"
    args = w.get("args")
    if args is not None and not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
        raise InvalidInputError(f"{where}.args is {_short(args)}; expected a list of strings.")
    out: dict[str, Any] = {"args": tuple(args or ())}
    for name in ("nodes", "graphs"):
        v = w.get(name)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 1 << 31):
            raise InvalidInputError(f"{where}.{name} is {_short(v)}; expected an integer from 0 to 2^31-1.")
        out[name] = v
    ok = w.get("check_ok")
    if ok is not None and not isinstance(ok, bool):
        raise InvalidInputError(f"{where}.check_ok is {_short(ok)}; expected true, false or null.")
    diff = w.get("max_abs_diff")
    if diff is not None and (not isinstance(diff, (int, float)) or isinstance(diff, bool) or not math.isfinite(diff)):
        raise InvalidInputError(f"{where}.max_abs_diff is {_short(diff)}; expected a finite number or null.")
    out.update(check_ok=ok, max_abs_diff=None if diff is None else float(diff))
    return out


#: A sample above this (µs, over 16 minutes per replay) is not a measurement of a CUDA graph.
MAX_SAMPLE_US = 1e9


def _short(v: Any) -> str:
    return short_value(v)


def _samples(xs: Any, source: str, key: str, name: str, *, required: bool = False) -> tuple[float, ...]:
    if xs is None and not required:
        return ()
    if (not isinstance(xs, list) or (required and not xs)
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)):
        raise InvalidInputError(f"{source}: workload {key!r} has no list of numeric samples in {name!r}.")
    for i, x in enumerate(xs):
        if not (0 < x < MAX_SAMPLE_US and math.isfinite(x)):
            raise InvalidInputError(
                f"{source}: workloads[{key!r}].{name}[{i}] is {_short(x)}: a time must be a positive, finite number of µs "
                f"below {MAX_SAMPLE_US:g}. The file was edited or damaged; record it again.")
    return tuple(float(x) for x in xs)


def merge(runs: Sequence[WorkloadResult]) -> WorkloadResult:
    """Pool the results of several fresh processes of one workload: samples concatenated, each
    run's median kept (a process-level offset is noise the gate must see). A failed run wins."""
    if not runs:
        raise ValueError("merge needs at least one result")
    for r in runs:
        if r.failed:
            return r
    first = runs[0]
    eager = [x for r in runs for x in (r.eager_us or ())] if all(r.eager_us for r in runs) else first.eager_us
    return replace(
        first,
        gpu_us=tuple(x for r in runs for x in r.gpu_us),
        capture_medians_us=tuple(x for r in runs for x in (r.capture_medians_us or (r.stats().median,))),
        host_us=tuple(x for r in runs for x in r.host_us),
        eager_us=tuple(eager) if eager else None,
        clock_mhz=tuple(c for r in runs for c in r.clock_mhz),
        runs=len(runs),
        run_medians_us=tuple(r.stats().median for r in runs),
    )


@dataclass(frozen=True)
class BenchResults:
    """Every workload's result of one ``cgtool bench`` run, and the machine it ran on."""

    workloads: tuple[WorkloadResult, ...]
    environment: Mapping[str, Any] = field(default_factory=dict)
    schema_version: int = BENCH_SCHEMA_VERSION

    @classmethod
    def of(cls, results: Sequence[WorkloadResult]) -> "BenchResults":
        ok = [w for w in results if not w.failed]
        return cls(tuple(results), ok[0].environment if ok else {})

    def by_ident(self) -> dict[tuple[str, int | None], WorkloadResult]:
        return {w.ident: w for w in self.workloads}

    @property
    def failed(self) -> list[WorkloadResult]:
        return [w for w in self.workloads if w.failed]

    def to_json(self) -> dict[str, Any]:
        return {"kind": "bench", "schema_version": self.schema_version,
                "workloads": {w.key: w.to_json() for w in self.workloads},
                "environment": dict(self.environment)}

    @classmethod
    def from_json(cls, doc: Any, source: str) -> "BenchResults":
        other = other_artifact(doc)
        if other is not None:  # a valid file of another kind: the wrong argument, exit 2 like deps and diff
            raise UsageError(f"{source} is {other}, not bench results: this takes the files `cgtool bench --json "
                             "FILE` writes. A graph or a trace goes to `cgtool topo`, `deps`, `diff` or `report`.")
        if not isinstance(doc, dict) or doc.get("kind") != "bench" or not isinstance(doc.get("workloads"), dict):
            raise InvalidInputError(f"{source} is not a cgtool bench result (no kind='bench' with a 'workloads' "
                                    "object). Write one with `cgtool bench --json FILE`.")
        v = doc.get("schema_version", 1)
        if not isinstance(v, int) or isinstance(v, bool) or v > BENCH_SCHEMA_VERSION:
            raise InvalidInputError(f"{source} has bench schema version {v!r}; this cgtool reads up to "
                                    f"{BENCH_SCHEMA_VERSION}. Upgrade cgtool.")
        ws = tuple(WorkloadResult.from_json(str(k), w, source) for k, w in doc["workloads"].items())
        env = doc.get("environment")
        if env is not None and not isinstance(env, dict):
            raise InvalidInputError(f"{source}: environment should be an object, not {_short(env)}.")
        return cls(ws, env if isinstance(env, dict) else {}, v)

    @classmethod
    def load(cls, path: str | Path, *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> "BenchResults":
        res = cls.from_json(load_json(path, max_bytes=max_bytes), str(path))
        if not res.workloads:  # a gate against nothing passes whatever happens
            raise InvalidInputError(f"{path} has no workloads: there is nothing to compare. Write results with "
                                    "`cgtool bench TARGET --json FILE`.")
        return res

    def save(self, path: str | Path, *, force: bool = False) -> Path:
        return write_json(path, self.to_json(), force=force)


def other_artifact(doc: Any) -> str | None:
    """What a document that is not bench results is, when it is another cgtool artifact ("a graph
    export", "a trace"); None otherwise (then it is an invalid bench file)."""
    if not isinstance(doc, dict) or doc.get("kind") == "bench":
        return None
    if isinstance(doc.get("nodes"), list) and "exec_graph_id" in doc:
        return "a graph export"
    if isinstance(doc.get("traceEvents"), list):
        return "a trace"
    return None


def env_mismatch(old: BenchResults, new: BenchResults) -> list[str]:
    """The fingerprint fields that differ between two results (empty: comparable)."""
    eo, en = old.environment, new.environment
    return [f"{k}: {eo.get(k)!r} vs {en.get(k)!r}" for k in ENV_KEYS if eo.get(k) != en.get(k)]
