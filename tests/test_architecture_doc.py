"""docs/architecture.md names files of the package as they are: every file name it mentions (a
``.py`` or ``.c`` file, or a folder ending in ``/``) exists in the checkout, and every module of the
package is mentioned in it (so a new module gets its line)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
NAME = re.compile(r"(?<![\w./-])((?:[A-Za-z_][\w-]*/)*[A-Za-z_][\w-]*(?:\.py|\.c|/))(?![\w/])")


def mentioned() -> set[str]:
    return {m.group(1) for m in NAME.finditer(DOC.read_text())}


def test_names_are_found_in_the_text():
    assert {"capture/record/", "artifacts/recording.py", "capture/record/_nodecb.c", "deps.py", "trace/"} <= mentioned()


def test_every_file_it_names_exists():
    """A name resolves to a path under the checkout's root, ``cgtool/``, or one of its folders."""
    files = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if ".git" not in p.parts]
    files += [f + "/" for f in files]
    missing = [n for n in sorted(mentioned()) if not any(f == n or f.endswith("/" + n) for f in files)]
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_every_module_of_the_package_is_mentioned():
    text = DOC.read_text()
    modules = [p for p in (ROOT / "cgtool").rglob("*.py") if p.name != "__init__.py" and p.name != "__main__.py"]
    unnamed = sorted(str(p.relative_to(ROOT)) for p in modules if p.name not in text and p.stem not in text)
    assert not unnamed, f"modules docs/architecture.md does not mention: {unnamed}"
