"""TARGET conventions and every loading error path (no GPU needed)."""

import sys
import textwrap

import pytest

from cgtool.capture.entrypoint import Precaptured, call_setup, parse_target, resolve
from cgtool.errors import CaptureError, UsageError


def write(tmp_path, name, body):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def test_script_defaults_to_setup(tmp_path):
    p = write(tmp_path, "w.py", "def setup():\n    return lambda: 1\n")
    t = parse_target(str(p))
    assert t.function == "setup" and t.path == p.resolve() and t.name == "w"
    assert call_setup(t, resolve(t))() == 1


def test_script_colon_function(tmp_path):
    p = write(tmp_path, "w.py", "def other():\n    return lambda: 2\n")
    t = parse_target(f"{p}:other")
    assert t.name == "w-other" and call_setup(t, resolve(t))() == 2


def test_module_colon_function(tmp_path, monkeypatch):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "work.py").write_text("def make():\n    return lambda: 3\n")
    monkeypatch.chdir(tmp_path)
    t = parse_target("mypkg.work:make")
    assert t.module == "mypkg.work" and call_setup(t, resolve(t))() == 3


def test_main_block_never_runs_and_args_arrive(tmp_path):
    p = write(tmp_path, "w.py", """
        import sys
        SEEN = list(sys.argv[1:])
        def setup():
            return lambda: SEEN
        if __name__ == "__main__":
            raise SystemExit("the __main__ block ran")
    """)
    t = parse_target(str(p))
    assert call_setup(t, resolve(t, ["--n", "4"]), ["--n", "4"])() == ["--n", "4"]
    assert sys.argv[1:] != ["--n", "4"]  # restored


def test_missing_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="No such script"):
        parse_target(str(tmp_path / "nope.py"))


def test_missing_function_lists_what_exists(tmp_path):
    p = write(tmp_path, "w.py", "def build():\n    pass\ndef step():\n    pass\n")
    with pytest.raises(UsageError) as e:
        resolve(parse_target(f"{p}:nope"))
    assert "no function 'nope'" in e.value.message and "build, step" in e.value.message


def test_syntax_error_points_at_file_and_line(tmp_path):
    p = write(tmp_path, "w.py", "x = 1\ndef setup(:\n    pass\n")
    with pytest.raises(CaptureError) as e:
        resolve(parse_target(str(p)))
    assert f"{p}:2" in e.value.message or "w.py:2" in e.value.message


def test_import_error_in_script_points_at_the_line(tmp_path):
    p = write(tmp_path, "w.py", "import os\nimport not_a_real_module_xyz\n")
    with pytest.raises(CaptureError) as e:
        resolve(parse_target(str(p)))
    assert "w.py:2" in e.value.message and "not_a_real_module_xyz" in e.value.message


def test_exception_at_load_points_at_the_line(tmp_path):
    p = write(tmp_path, "w.py", "a = 1\nb = a / 0\n")
    with pytest.raises(CaptureError) as e:
        resolve(parse_target(str(p)))
    assert "ZeroDivisionError" in e.value.message and "w.py:2" in e.value.message


def test_setup_raising_points_at_the_line(tmp_path):
    p = write(tmp_path, "w.py", "def setup():\n    x = {}\n    return x['missing']\n")
    t = parse_target(str(p))
    with pytest.raises(CaptureError) as e:
        call_setup(t, resolve(t))
    assert "KeyError" in e.value.message and "w.py:3" in e.value.message


def test_setup_returning_a_value_not_a_step(tmp_path):
    p = write(tmp_path, "w.py", "def setup():\n    return 42\n")
    t = parse_target(str(p))
    with pytest.raises(UsageError, match="return step"):
        call_setup(t, resolve(t))


def test_precaptured_is_accepted(tmp_path):
    p = write(tmp_path, "w.py", """
        from cgtool.capture.entrypoint import Precaptured
        def setup():
            return Precaptured(graphs=[], step=lambda: 1)
    """)
    t = parse_target(str(p))
    assert isinstance(call_setup(t, resolve(t)), Precaptured)


def test_sys_exit_at_load(tmp_path):
    p = write(tmp_path, "w.py", "import sys\nsys.exit(3)\n")
    with pytest.raises(CaptureError, match="sys.exit"):
        resolve(parse_target(str(p)))


def test_unknown_module(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="Cannot import module"):
        resolve(parse_target("no_such_pkg_abc.mod:fn"))


def test_bare_module_name_needs_a_function():
    with pytest.raises(UsageError, match="Name the function"):
        parse_target("some.module")
