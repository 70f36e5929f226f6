"""One libcupti locator (``cgtool.capture._libcupti.load_libcupti``) for the export's ids and the
recorder's subscriber: the copy a process already maps is the answer, whoever loaded it, so that a
process never holds two copies (CUPTI takes one subscriber per process and copy). Checked with two
stand-in libraries built here (each exports ``cuptiSubscribe``), in fresh processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("cc") is None,
                                reason="needs Linux (/proc/self/maps) and a C compiler")


def _lib(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    src = path.parent / "fake.c"
    src.write_text("int cuptiSubscribe(void) { return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(path), str(src)], check=True)
    return path


def _run(code: str, site: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(site)]))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


PROBE = """
import ctypes, json, sys
from cgtool.capture import _libcupti
{before}
lib = _libcupti.load_libcupti()
again = _libcupti.load_libcupti()
print(json.dumps({{"found": lib._name, "again": again._name, "mapped": _libcupti.mapped_libcupti()}}))
"""


@pytest.mark.subprocess
def test_the_wheels_file_is_found_and_then_is_the_one_answer(tmp_path: Path):
    wheel = _lib(tmp_path / "site" / "nvidia" / "cu13" / "lib" / "libcupti.so.13")
    got = _run(PROBE.format(before=""), tmp_path / "site")
    assert got["found"] == got["again"] == str(wheel)
    assert [os.path.realpath(p) for p in got["mapped"]] == [os.path.realpath(wheel)]


@pytest.mark.subprocess
def test_a_copy_already_mapped_wins_over_the_wheels_file(tmp_path: Path):
    """torch (or cupti-python) loaded another copy first: cgtool uses that one, loads no second."""
    _lib(tmp_path / "site" / "nvidia" / "cu13" / "lib" / "libcupti.so.13")
    other = _lib(tmp_path / "toolkit" / "libcupti.so.12")
    got = _run(PROBE.format(before=f"ctypes.CDLL({str(other)!r})"), tmp_path / "site")
    assert got["found"] == got["again"] == str(other)
    assert [os.path.realpath(p) for p in got["mapped"]] == [os.path.realpath(other)]


def test_the_subscriber_and_the_export_ask_the_same_locator():
    from cgtool.capture import _libcupti, graphread
    from cgtool.capture.record import _subscriber

    assert _subscriber.load_libcupti is _libcupti.load_libcupti is graphread.load_libcupti
    assert not hasattr(_subscriber, "libcupti") and not hasattr(_subscriber, "_mapped")
