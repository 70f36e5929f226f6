"""pytest plugin (``-p cgtool_select``): run only the tests named by the JSON file at CGTOOL_SELECT.

The file holds ``{"ids": [...], "whole": {file: [class or "*", ...]}, "patterns": {file: regex}}``:
ids ``file::Class::test`` picked one by one, classes picked whole, and a regular expression matched
(``re.search``) against ``Class::test`` in a file. The listed ids that were not collected are written
to CGTOOL_SELECT + ".<test file>.missing", so a renamed test shows up there instead of silently not
running, and every id selected to CGTOOL_SELECT + ".<test file>.selected".

Each test's start and outcome are appended, one ``os.write`` of one JSON line each, to
CGTOOL_SELECT + ".<test file>.outcomes": pytest's JUnit XML is written at the end of the run, so
when the process dies (an abort in a destructor) these lines alone say which tests ran, how they
ended, and which one was running when the process died.
"""

import json
import os
import re
from pathlib import Path

_OUTCOME_FILES: dict = {}


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


def _record(nodeid: str, **fields) -> None:
    sel = os.environ.get("CGTOOL_SELECT")
    if not sel:
        return
    key = _key(nodeid)
    path = f"{sel}.{key.split('::')[0]}.outcomes"
    fd = _OUTCOME_FILES.get(path)
    if fd is None:
        fd = _OUTCOME_FILES[path] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, (json.dumps({"test": key, **fields}) + "\n").encode())


def pytest_runtest_logstart(nodeid, location):  # noqa: ARG001
    _record(nodeid, event="start")


def pytest_runtest_logreport(report):
    if report.when in ("call", "teardown") or report.outcome != "passed":
        outcome = report.outcome
        if report.when != "call" and outcome == "failed":
            outcome = "error"
        if hasattr(report, "wasxfail"):
            outcome = "xfail"
        message = ""
        if report.longrepr is not None and outcome != "passed":
            text = getattr(report.longrepr, "reprcrash", None)
            message = str(text.message if text is not None else report.longrepr).strip().splitlines()[0][:200] \
                if str(report.longrepr).strip() else ""
        _record(report.nodeid, event="end", when=report.when, outcome=outcome, message=message)


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
