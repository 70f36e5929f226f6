"""pytest plugin (``-p cgtool_select``): run only the tests listed in the JSON file named by
CGTOOL_SELECT (ids ``file::Class::test``), and write the listed ids that were not collected to
CGTOOL_SELECT + ".<test file>.missing" -- a renamed test shows up there instead of silently not running."""

import json
import os
from pathlib import Path


def _key(nodeid: str) -> str:
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).name}::{rest}"


def pytest_collection_modifyitems(session, config, items):  # noqa: ARG001
    sel = os.environ.get("CGTOOL_SELECT")
    if not sel:
        return
    files = {Path(a.split("::")[0]).name for a in config.args}
    wanted = {t for t in json.loads(Path(sel).read_text()) if t.split("::")[0] in files}
    keep = [it for it in items if _key(it.nodeid) in wanted]
    drop = [it for it in items if _key(it.nodeid) not in wanted]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep
    found = {_key(it.nodeid) for it in keep}
    for f in sorted(files):
        Path(f"{sel}.{f}.missing").write_text(json.dumps(sorted(t for t in wanted - found if t.startswith(f))))
