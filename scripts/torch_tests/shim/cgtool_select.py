"""pytest plugin (``-p cgtool_select``): run only the tests named by the JSON file at CGTOOL_SELECT.

The file holds ``{"ids": [...], "whole": {file: [class or "*", ...]}, "patterns": {file: regex}}``:
ids ``file::Class::test`` picked one by one, classes picked whole, and a regular expression matched
(``re.search``) against ``Class::test`` in a file. The listed ids that were not collected are written
to CGTOOL_SELECT + ".<test file>.missing", so a renamed test shows up there instead of silently not
running, and every id selected to CGTOOL_SELECT + ".<test file>.selected".
"""

import json
import os
import re
from pathlib import Path


def _key(nodeid: str) -> str:
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).name}::{rest}"


def wanted(key: str, spec: dict) -> bool:
    """Whether the test ``file::Class::test`` is selected by ``spec``."""
    fname, _, rest = key.partition("::")
    if key in spec.get("ids", ()):
        return True
    classes = spec.get("whole", {}).get(fname, ())
    if "*" in classes or rest.split("::")[0] in classes:
        return True
    pattern = spec.get("patterns", {}).get(fname)
    return bool(pattern and re.search(pattern, rest))


def pytest_collection_modifyitems(session, config, items):  # noqa: ARG001
    sel = os.environ.get("CGTOOL_SELECT")
    if not sel:
        return
    spec = json.loads(Path(sel).read_text())
    files = {Path(a.split("::")[0]).name for a in config.args}
    keep = [it for it in items if wanted(_key(it.nodeid), spec)]
    drop = [it for it in items if not wanted(_key(it.nodeid), spec)]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep
    found = sorted({_key(it.nodeid) for it in keep})
    for f in sorted(files):
        listed = {t for t in spec.get("ids", ()) if t.split("::")[0] == f}
        Path(f"{sel}.{f}.missing").write_text(json.dumps(sorted(listed - set(found))))
        Path(f"{sel}.{f}.selected").write_text(json.dumps([t for t in found if t.startswith(f + "::")]))
