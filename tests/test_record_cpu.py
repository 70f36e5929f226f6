"""`cgtool record` pieces that need no GPU: attribution, the launcher's checks, CLI exit codes, the summary."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
import types
from typing import Any

import pytest
from rich.console import Console

from cgtool.capture.record import attribution, launcher
from cgtool.capture.record.options import RecordOptions
from fake_cupti_abi import fake_site
from cgtool.errors import InvalidInputError, OutputExistsError, UsageError
from cgtool.artifacts.recording import load_recordings
from cgtool.report.record_table import record_summary

DATA = Path(__file__).parent / "data"


# ------------------------------------------------------------------------------------ attribution
def test_classify() -> None:
    assert attribution.classify(__file__) == "user"
    assert attribution.classify(sysconfig.get_paths()["stdlib"] + "/runpy.py") == "library"
    assert attribution.classify(attribution.__file__) == "library"  # cgtool's own frames are not the user's
    assert attribution.classify("<frozen runpy>") == "library"
    assert attribution.classify("/tmp/torchinductor_me/ab/cabc.py") == "generated"
    assert attribution.classify("<eval_with_key>.3") == "generated"


def test_the_script_cgtool_runs_is_the_users_wherever_it_lies(tmp_path: Path, monkeypatch) -> None:
    """The sample `cgtool demo` runs ships inside cgtool (in site-packages after a wheel install):
    its lines are still the user's, not "?"."""
    from cgtool.capture import entrypoint

    monkeypatch.setattr(attribution, "_USER_FILES", set())
    pkg = tmp_path / "lib" / "site-packages" / "pkg"
    pkg.mkdir(parents=True)
    f = pkg / "work.py"
    f.write_text("import sys\nFRAME = sys._getframe()\n")
    attribution.classify.cache_clear()
    assert attribution.classify(str(f)) == "library"
    mod = entrypoint.load_module(entrypoint.parse_target(str(f)))
    assert attribution.classify(str(f)) == "user"
    site = attribution.resolve([(mod.FRAME.f_code, mod.FRAME.f_lasti)])
    assert (site.file, site.line) == (str(f), 2)
    attribution.classify.cache_clear()


def test_inductor_ops_reads_the_source_nodes_comment(tmp_path: Path) -> None:
    f = tmp_path / "torchinductor_x" / "k.py"
    f.parent.mkdir()
    f.write_text(
        "def call(args):\n"
        "    # Topologically Sorted Source Nodes: [linear, gelu], Original ATen: [aten.addmm, aten.gelu]\n"
        "    stream0 = get_raw_stream(0)\n"
        "    triton_poi_fused_gelu_0.run(buf0, 1024, stream=stream0)\n"
        "    extern_kernels.mm(a, b, out=buf1)\n"
    )
    assert attribution.inductor_ops(str(f), 4) == "linear, gelu (aten.addmm, aten.gelu)"
    assert attribution.inductor_ops(str(f), 1) is None  # nothing above the def


def _frames_here() -> list[attribution.RawFrame]:
    return attribution.grab(sys._getframe())


def test_resolve_takes_the_innermost_user_frame() -> None:
    frames = attribution.grab(sys._getframe())
    line = sys._getframe().f_lineno - 1
    site = attribution.resolve(frames)
    assert site.file == __file__ and site.function == "test_resolve_takes_the_innermost_user_frame"
    assert site.line == line
    assert site.code() == "frames = attribution.grab(sys._getframe())"
    assert site.short().startswith(f"test_record_cpu.py:{line}")


def test_resolve_falls_back_to_the_capturing_thread() -> None:
    """No user frame in the creating thread (autograd's): the user line comes from the fallback stack."""
    lib_only = [(c, ln) for c, ln in _frames_here() if attribution.classify(c.co_filename) != "user"]
    fb = _frames_here()
    site = attribution.resolve(lib_only, autograd_op="MmBackward0", fallback=fb)
    assert site.file == __file__ and site.op == "MmBackward0"


# --------------------------------------------------------------------------------------- launcher
def test_command_line(tmp_path: Path) -> None:
    """What `cgtool record -- ...` starts: a leading bare `python` runs as this interpreter (which has
    cgtool), a script or `-m module` too; any other command as it is, found on PATH."""
    prog = tmp_path / "p.py"
    prog.write_text("print(1)\n")
    opts = RecordOptions()
    py = sys.executable
    assert launcher.command_line(["python", str(prog), "-x"], opts) == [py, str(prog), "-x"]
    assert launcher.command_line(["python3", "-m", "pkg.mod", "a"], opts) == [py, "-m", "pkg.mod", "a"]
    assert launcher.command_line([str(prog)], opts) == [py, str(prog)]
    assert launcher.command_line(["python", "-c", "pass"], opts) == [py, "-c", "pass"]
    sh = shutil.which("sh")
    assert sh is not None
    assert launcher.command_line(["sh", "-c", "exit 0"], opts) == ["sh", "-c", "exit 0"]  # a command, as it is
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    assert launcher.command_line([str(script)], opts) == [str(script)]
    for bad in (["python"], ["python", "-m"], ["python", str(tmp_path / "nope.py")], ["no-such-command-xyz"],
                ["python", "-I", str(prog)]):
        with pytest.raises(UsageError):
            launcher.command_line(bad, opts)


def test_prepare_out(tmp_path: Path) -> None:
    out = tmp_path / "rec"
    launcher.prepare_out(out, force=False)
    (out / "index.json").write_text("{}")
    with pytest.raises(OutputExistsError):
        launcher.prepare_out(out, force=False)
    launcher.prepare_out(out, force=True)
    assert out.is_dir() and not any(out.iterdir())
    other = tmp_path / "precious"
    other.mkdir()
    (other / "thesis.tex").write_text("x")
    with pytest.raises(UsageError):
        launcher.prepare_out(other, force=True)  # not a recording: never deleted
    assert (other / "thesis.tex").exists()


def test_command_line_uses_torchrun_for_ranks(tmp_path: Path) -> None:
    prog = tmp_path / "p.py"
    prog.write_text("print(1)\n")
    many = launcher.command_line(["python", str(prog), "a"], RecordOptions(nproc_per_node=2, nnodes="2"))
    assert many[1:5] == ["-m", "torch.distributed.run", "--nproc-per-node", "2"]
    assert many[5:7] == ["--nnodes", "2"] and many[-2:] == [str(prog), "a"]
    with pytest.raises(UsageError):  # another command takes its own launcher
        launcher.command_line(["sh", "-c", "true"], RecordOptions(nproc_per_node=2))


# -------------------------------------------------------------------------------------------- CLI
def test_cli_bad_input(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run_cli("record", "-o", str(tmp_path / "r"), "--", "python", str(tmp_path / "missing.py"))
    assert code == 2 and "Program not found" in err
    (tmp_path / "exists").mkdir()
    (tmp_path / "p.py").write_text("print(1)\n")
    code, _, err = run_cli("record", "-o", str(tmp_path / "exists"), "--", "python", str(tmp_path / "p.py"))
    assert code == 2 and "--force" in err
    code, _, err = run_cli("record", "-o", str(tmp_path / "r2"))
    assert code == 2 and "No program given" in err


def _driver(tmp_path: Path, args: list[str], setup: str, env_extra: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """`cgtool record ARGS` in a subprocess after ``setup`` (Python run first in that process)."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root)] + [os.environ.get("PYTHONPATH", "")]),
               COLUMNS="200")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", setup + "; from cgtool.cli.entry import main; main(sys.argv[1:])",
                           "record", *args], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)


@pytest.mark.subprocess
def test_no_cuda_is_said_first_and_nothing_is_left(tmp_path: Path) -> None:
    """On a machine without a CUDA driver (this one, or a CPU-only torch's) `record` says so before
    asking for anything else, runs nothing and leaves no folder."""
    marker = tmp_path / "ran"
    (tmp_path / "p.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    p = _driver(tmp_path, ["-o", "r", "--", "python", "p.py"],
                "import sys, ctypes; from cgtool.capture.record import launcher; "
                "launcher.ctypes = type('C', (), {'CDLL': staticmethod(lambda name: (_ for _ in ()).throw(OSError(name)))})")
    assert p.returncode == 3, p.stderr
    assert "No CUDA here" in p.stderr and p.stderr.index("No CUDA") < (p.stderr.find("cupti") % 10**9)
    assert not marker.exists() and not (tmp_path / "r").exists()


@pytest.mark.subprocess
def test_without_cupti_python_nothing_is_left_and_a_retry_works(tmp_path: Path) -> None:
    """cupti-python missing: exit 3 naming it, the program not run, no folder left behind, so the
    same command works once it is installed (here: the stand-in CUPTI)."""
    marker = tmp_path / "ran"
    (tmp_path / "p.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    no_cupti = ("import sys; from cgtool.capture.record import launcher; "
                "launcher.ctypes = type('C', (), {'CDLL': staticmethod(lambda name: None)}); sys.modules['cupti'] = None")
    p = _driver(tmp_path, ["-o", "r", "--", "python", "p.py"], no_cupti)
    assert p.returncode == 3 and "cupti-python" in p.stderr, p.stderr
    assert not marker.exists() and not (tmp_path / "r").exists()
    site = fake_site(str(tmp_path / "site"))
    p = _driver(tmp_path, ["-o", "r", "--", "python", "p.py"],
                "import sys; from cgtool.capture.record import launcher; launcher.preflight = lambda: None",
                {"PYTHONPATH": site + os.pathsep + str(Path(__file__).resolve().parents[1]),
                 "CGTOOL_RECORD_SUBSCRIBER": "cupti-python"})
    assert p.returncode == 0, p.stderr
    assert marker.exists() and (tmp_path / "r" / "index.json").exists()


@pytest.mark.subprocess
def test_cupti_held_by_another_profiler_stops_before_the_program(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "p.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    site = fake_site(str(tmp_path / "site"))
    p = _driver(tmp_path, ["-o", "r", "--", "python", "p.py"],
                "import sys; from cgtool.capture.record import launcher; launcher.preflight = lambda: None",
                {"PYTHONPATH": site + os.pathsep + str(Path(__file__).resolve().parents[1]),
                 "CGTOOL_RECORD_SUBSCRIBER": "cupti-python", "FAKE_CUPTI_HELD": "1"})
    assert p.returncode == 3, p.stderr
    assert "another profiler holds it" in p.stderr and "Traceback" not in p.stderr
    assert not marker.exists() and not (tmp_path / "r").exists()


# --------------------------------------------------------------------------------- reading/summary
def _rows(text: str, first: str) -> list[list[str]]:
    """The cells of the table rows whose first cell starts with ``first``."""
    out = []
    for ln in text.splitlines():
        if ln.startswith("│"):
            cells = [c.strip() for c in ln.strip("│").split("│")]
            if cells and cells[0].startswith(first):
                out.append(cells)
    return out


def test_summary_table_names_every_graph() -> None:
    recs = load_recordings(DATA / "record_server")
    con = Console(file=io.StringIO(), width=160, color_system=None)
    record_summary(con, recs)
    text = con.file.getvalue()  # type: ignore[attr-defined]
    rows = _rows(text, "#")
    assert len(rows) == len(recs[0].graphs)
    for cells, g in zip(rows, recs[0].graphs):
        assert cells[:3] == [g.label.split()[0], str(g.nodes), str(g.replays)]
        assert cells[-1] == Path(str(g.captured_at)).name
    assert "memory at exit: pool" in text


def test_summary_of_ranks_and_empty() -> None:
    """Each rank's graphs under its own title, whatever the checkout's path (the titles hold no path)."""
    con = Console(file=io.StringIO(), width=100, color_system=None)
    recs = load_recordings(DATA / "record_ranks")
    record_summary(con, recs + load_recordings(DATA / "record_nograph"))
    text = con.file.getvalue()  # type: ignore[attr-defined]
    titles = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("process ")]
    assert titles == [f"process {r.pid} (rank {r.rank}): {len(r.graphs)} graph(s)" for r in recs if r.graphs]
    assert [r.rank for r in recs if r.graphs] == [0, 1]
    assert str(DATA) not in "".join(titles)
    con = Console(file=io.StringIO(), width=100, color_system=None)
    record_summary(con, load_recordings(DATA / "record_nograph"))
    assert "instantiated no CUDA graph" in con.file.getvalue()  # type: ignore[attr-defined]


def test_bad_recordings_are_invalid_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        load_recordings(tmp_path)
    (tmp_path / "index.json").write_text(json.dumps({"graphs": []}))
    with pytest.raises(InvalidInputError):
        load_recordings(tmp_path)
    (tmp_path / "index.json").write_bytes(gzip.compress(b"{not json"))
    with pytest.raises(InvalidInputError):
        load_recordings(tmp_path)
    (tmp_path / "index.json").write_text(json.dumps({"cgtool_record": 9, "graphs": []}))
    with pytest.raises(InvalidInputError, match="newer"):
        load_recordings(tmp_path)


def test_deps_and_topo_take_a_recording_folder(run_cli) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli("deps", str(DATA / "record_server"))
    assert code == 0, err
    assert "exact (graph node ids)" in out  # the recording's trace joins its embedded exports by node id
    code, out, err = run_cli("topo", str(DATA / "record_train"))
    assert code == 0, err
    assert out.count("topology of") == 2 and "measured" in out  # both graphs, weighted by the trace


# ------------------------------------------------------------------------- lines and calls
def _here() -> tuple[Any, int, int]:
    """(code, lasti, lineno) of the caller, as a callback would see its frame."""
    f = sys._getframe(1)
    return f.f_code, f.f_lasti, f.f_lineno


def test_line_of_agrees_with_f_lineno_everywhere() -> None:
    """line_of(code, lasti) must give what f_lineno gives, for every frame of a deep stack (library
    frames of pytest and pluggy included: long functions, loops, try blocks)."""
    f: Any = sys._getframe()
    n = 0
    while f is not None:
        assert attribution.line_of(f.f_code, f.f_lasti) == f.f_lineno, f.f_code
        f = f.f_back
        n += 1
    assert n > 10
    samples = [_here(),
               _here() if True else None,
               (lambda: _here())(),  # noqa: PLC3002
               ]
    for code, lasti, line in samples:
        assert attribution.line_of(code, lasti) == line


def _outer_call() -> str | None:
    """What a node made here would get as its call: the expression the caller's caller is calling."""
    f = sys._getframe(2)
    return attribution.call_at(f.f_code, f.f_lasti)


class _Layer:
    def __call__(self, x: Any = None) -> str | None:
        return _outer_call()

    def softmax(self, dim: int) -> str | None:
        return _outer_call()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="column positions (co_positions) need Python 3.11")
def test_call_at_names_the_expression_being_called() -> None:
    layer = _Layer()
    F = types.SimpleNamespace(gelu=lambda x: _outer_call())
    self_like = types.SimpleNamespace(attn=layer)
    assert layer.softmax(-1) == "layer.softmax"
    assert layer(None) == "layer"
    assert F.gelu(1) == "F.gelu"
    assert self_like.attn.softmax(-1) == "self_like.attn.softmax"
    assert [layer][0](0) == "[layer][0]"
    spread = self_like.attn.softmax(
        -1,
    )
    assert spread == "self_like.attn.softmax"  # a call over several lines
    inner = [F.gelu(layer.softmax(0))]  # the inner call, then the outer one
    assert inner == ["F.gelu"]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="column positions (co_positions) need Python 3.11")
def test_call_at_operators_seen_from_the_dunder() -> None:
    seen: list[str | None] = []

    class Op:
        def _note(self) -> None:
            f = sys._getframe(2)  # the frame running the operator
            seen.append(attribution.call_at(f.f_code, f.f_lasti))

        def __add__(self, o: Any) -> "Op":
            self._note()
            return self

        def __matmul__(self, o: Any) -> "Op":
            self._note()
            return self

        def __getitem__(self, k: Any) -> "Op":
            self._note()
            return self

        def __neg__(self) -> "Op":
            self._note()
            return self

    o = Op()
    _ = o + o
    _ = o @ o
    _ = o[1]
    _ = -o
    o += o
    assert seen == ["add", "matmul", "getitem", "neg", "add"]


def test_site_labels() -> None:
    S = attribution.Site
    eager = S("/p/model.py", 22, "forward", "layer_norm", "Block", None, (), call="self.norm")
    assert eager.short() == "model.py:22 self.norm (layer_norm)"
    same = S("/p/model.py", 30, "forward", "softmax", None, None, (), call="x.softmax")
    assert same.short() == "model.py:30 x.softmax"
    gen = S("/p/model.py", 9, "main", "linear, gelu (aten.addmm, aten.gelu)", None, "/tmp/torchinductor_u/ab.py:40",
            (), call="model")
    assert gen.short() == "model.py:9 linear, gelu (aten.addmm, aten.gelu)"
    bwd = S("/p/train.py", 5, "main", "AddmmBackward0", None, None, (), call="torch.cuda.make_graphed_callables",
            backward=True)
    assert bwd.short() == "train.py:5 AddmmBackward0"
    inner = S("/p/model.py", 23, "forward", None, "Linear", None, (), call="self.up", module_inside=True)
    assert inner.short() == "model.py:23 self.up (Linear)"
    holding = S("/p/model.py", 23, "forward", None, "Block", None, (), call="F.gelu")  # Block holds the line
    assert holding.short() == "model.py:23 F.gelu"
    bare = S("/p/model.py", 3, "f", None, "Linear", None, ())
    assert bare.short() == "model.py:3 Linear"
    assert S(None, None, None, None, None, None, ()).short() == "?"


def test_module_inside_the_user_line() -> None:
    """A module whose forward frame lies under the user's line (library code called from it) names
    what the line reached; the module whose forward holds the line does not."""
    lib_code = compile("def forward(self):\n    pass\n", sysconfig.get_paths()["stdlib"] + "/fake_linear.py", "exec")
    lib_fn = next(c for c in lib_code.co_consts if hasattr(c, "co_name"))
    user = sys._getframe()
    frames = [(lib_fn, 0), (user.f_code, user.f_lasti)]
    under = attribution.resolve(frames, modules=["Linear"], module_index=0)
    assert under.file == __file__ and under.module_inside and under.module == "Linear"
    holding = attribution.resolve(frames, modules=["Block"], module_index=1)
    assert not holding.module_inside


def test_the_report_of_a_recording_opens_on_its_summary(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`cgtool report REC` puts the recording's answers above the first graph: the never-replayed
    graph the compiled program made first (cudagraph trees' warm-up) is not what the page opens on."""
    out = tmp_path / "r.html"
    code, _, err = run_cli("report", str(DATA / "record_compiled"), "-o", str(out))
    assert code == 0, err
    page = out.read_text()
    assert page.index("class=recsummary") < page.index("id=tabs")
    recs = load_recordings(DATA / "record_compiled")
    never = [g for g in recs[0].graphs if g.replays == 0]
    assert f"{len(never)} graph(s) were never replayed" in page


def test_the_older_layouts_still_read(tmp_path: Path) -> None:
    """A recording of one process with its graphs beside its index (the layout before process
    trees, and what a process folder is), and one folder per torchrun rank (``rank<R>/``)."""
    (proc,) = (DATA / "record_server").glob("p*")
    one = tmp_path / "one"
    shutil.copytree(proc, one)
    (rec,) = load_recordings(one)
    assert [g.replays for g in rec.graphs] == [g.replays for g in load_recordings(DATA / "record_server")[0].graphs]
    ranks = tmp_path / "ranks"
    for r in load_recordings(DATA / "record_ranks"):
        if r.rank is not None:
            shutil.copytree(r.folder, ranks / f"rank{r.rank}")
    recs = load_recordings(ranks)
    assert [r.rank for r in recs] == [0, 1] and all(len(r.graphs) == 4 for r in recs)
    con = Console(file=io.StringIO(), width=100, color_system=None)
    record_summary(con, recs)
    assert "8 graph(s) in 2 of 2 recorded process(es)" in con.file.getvalue()  # type: ignore[attr-defined]
