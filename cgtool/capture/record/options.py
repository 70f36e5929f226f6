"""What `cgtool record` is asked to do: one options type for every way in.

The typer command (``cli/record_cmd.py``), the fast parser that starts the usual command lines
without typer (``cli/record_run.parse_fast``), the library API (``cgtool.record(out, ...)``) and every
recorded process (which reads them from the ``CGTOOL_RECORD`` environment variable its ancestor set,
``capture/record/process.py``) all take a :class:`RecordOptions`. Its defaults and the command
line's names, kinds and help texts are defined here once (:data:`CLI`).

Imports nothing beyond the standard library: the parent CLI loads it before the program starts.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal, Optional

Subscriber = Literal["auto", "c", "ctypes", "cupti-python"]
SUBSCRIBERS: tuple[str, ...] = ("auto", "c", "ctypes", "cupti-python")

#: The environment variable that chooses the CUPTI subscriber (documented in docs/record.md):
#: ``c`` (the compiled callback, where built), ``ctypes`` (a Python callback), ``cupti-python``
#: (cupti-python's own subscribe). Read once, by :meth:`RecordOptions.from_environment`.
SUBSCRIBER_ENV = "CGTOOL_RECORD_SUBSCRIBER"
#: The environment variable every recorded process reads its recording from (JSON, set by the
#: launcher or the library API for the processes they start).
PROCESS_ENV = "CGTOOL_RECORD"


@dataclass(frozen=True)
class RecordOptions:
    """One recording's settings."""

    out: Path = Path("cgtool-record")
    force: bool = False  # replace an existing recording folder
    trace_replays: int = 0  # trace K replays of each graph (CUPTI records) into the process's trace.json
    trace_skip: int = 1  # replays of each graph left untraced first (warm-up)
    coverage: bool = False  # kernel time in and out of graph replays (CUPTI kernel activity, whole run)
    nproc_per_node: int = 1  # start the program through torchrun with N ranks
    nnodes: Optional[str] = None  # passed to torchrun
    node_rank: Optional[int] = None  # passed to torchrun
    rdzv_endpoint: Optional[str] = None  # passed to torchrun
    follow: bool = True  # record every descendant Python process too (the library API may turn it off)
    subscriber: Subscriber = "auto"  # how CUPTI calls back (SUBSCRIBER_ENV)
    writer_quiet_s: float = 0.25  # the writer waits this long after the last capture before writing
    json_out: Optional[Path] = None  # the summary's answers as JSON (`-`: standard output)
    check_inputs: int = 100  # check the graphs' inputs before every N-th replay of the process (0: off)
    index_refresh_s: float = 1.0  # replay counts refreshed in the process's index.json this often (0: at the end)
    hang_after: Optional[int] = None  # seconds without a graph captured or launched before a process's stacks are written

    def __post_init__(self) -> None:
        if self.trace_replays < 0 or self.trace_skip < 0 or self.check_inputs < 0:
            raise ValueError("trace_replays, trace_skip and check_inputs are counts (>= 0)")
        if self.hang_after is not None and self.hang_after < 1:
            raise ValueError("hang_after is at least 1 second")
        if self.nproc_per_node < 1:
            raise ValueError("nproc_per_node is at least 1")
        if self.subscriber not in SUBSCRIBERS:
            raise ValueError(f"subscriber is one of {', '.join(SUBSCRIBERS)}, not {self.subscriber!r}")

    @property
    def kernel_activity(self) -> bool:
        """CUPTI kernel records are on: for --coverage, and for --trace-replays (which needs them)."""
        return self.coverage or self.trace_replays > 0

    def torchrun_args(self) -> list[str]:
        """torchrun's options other than --nproc-per-node (empty when none was given)."""
        out: list[str] = []
        for flag, v in (("--nnodes", self.nnodes), ("--node-rank", self.node_rank),
                        ("--rdzv-endpoint", self.rdzv_endpoint)):
            if v is not None:
                out += [flag, str(v)]
        return out

    @property
    def uses_torchrun(self) -> bool:
        return self.nproc_per_node > 1 or bool(self.torchrun_args())

    @classmethod
    def from_environment(cls, **kw: Any) -> "RecordOptions":
        """Options from keywords, with the subscriber from :data:`SUBSCRIBER_ENV` when not given."""
        if "subscriber" not in kw:
            env = os.environ.get(SUBSCRIBER_ENV, "").strip() or "auto"
            if env not in SUBSCRIBERS:
                raise ValueError(f"{SUBSCRIBER_ENV}={env!r}: expected one of {', '.join(SUBSCRIBERS)}")
            kw["subscriber"] = env
        return cls(**kw)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["out"] = str(self.out)
        d["json_out"] = None if self.json_out is None else str(self.json_out)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RecordOptions":
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        if "out" in kw:
            kw["out"] = Path(kw["out"])
        return cls(**kw)

    def with_out(self, out: Path) -> "RecordOptions":
        return replace(self, out=out)


@dataclass(frozen=True)
class CliOption:
    """One option of `cgtool record`'s command line."""

    names: tuple[str, ...]
    field: str
    kind: Literal["flag", "int>=0", "int>=1", "int", "str", "path"]
    help: str


#: `cgtool record`'s options before ``--``: names, the field they set, their kind, their help.
CLI: tuple[CliOption, ...] = (
    CliOption(("-o", "--output", "--out"), "out", "path", "Output folder."),
    CliOption(("--force",), "force", "flag", "Replace an existing recording folder."),
    CliOption(("--trace-replays",), "trace_replays", "int>=0",
              "Trace K replays of each graph with CUPTI (node ids, channels, the host's gap before each "
              "replay) into each process's trace.json."),
    CliOption(("--trace-skip",), "trace_skip", "int>=0", "Replays of each graph left untraced first (warm-up)."),
    CliOption(("--coverage",), "coverage", "flag",
              "Measure the share of the run's GPU kernel time spent inside graph replays, over the run and from "
              "the first graph on (CUPTI kernel records for the whole run: ~5% more wall time on the benchmark). "
              "On with --trace-replays."),
    CliOption(("--hang-after",), "hang_after", "int>=1",
              "Write the Python stacks of every process that made no progress (no graph captured, instantiated or "
              "launched) for S seconds into its stacks.txt, without stopping it; the summary says where each "
              "stood."),
    CliOption(("--check-inputs",), "check_inputs", "int>=0",
              "Check that the memory each graph reads is still the tensor it was captured with (not freed, not "
              "reused): before each graph's first two replays, before every N-th replay of the process, and at "
              "the end. On by default at N = 100; 0 turns them off (torch's allocator history then stays off and "
              "nothing is wrapped); docs/performance.md has what the checks cost."),
    CliOption(("--json",), "json_out", "path",
              "Also write the summary's answers as JSON (`-`: standard output): its findings, and each graph that "
              "read memory its program freed."),
    CliOption(("--nproc-per-node",), "nproc_per_node", "int>=1",
              "Start the program through torchrun with N ranks (the same as `-- torchrun --nproc-per-node N "
              "prog.py`)."),
    CliOption(("--nnodes",), "nnodes", "str", "Passed to torchrun."),
    CliOption(("--node-rank",), "node_rank", "int", "Passed to torchrun."),
    CliOption(("--rdzv-endpoint",), "rdzv_endpoint", "str", "Passed to torchrun."),
)

#: Option name -> its :class:`CliOption`.
CLI_BY_NAME: dict[str, CliOption] = {n: o for o in CLI for n in o.names}
DEFAULTS = RecordOptions()


def help_of(field: str) -> str:
    return next(o.help for o in CLI if o.field == field)


def process_env_value(opts: RecordOptions, *, launcher_pid: int | None, boot_dir: str,
                      cgtool_root: str) -> str:
    """The JSON every recorded process reads from :data:`PROCESS_ENV`."""
    return json.dumps({"options": opts.to_json(), "launcher": launcher_pid, "boot": boot_dir,
                       "cgtool_root": cgtool_root})
