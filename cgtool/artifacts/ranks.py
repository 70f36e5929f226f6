"""Per-rank files of a multi-GPU run: which file belongs to which rank."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Union

import msgspec

from cgtool.errors import InvalidInputError
from cgtool.artifacts.jsonio import DEFAULT_MAX_BYTES, decode, read_bytes

#: ``rank<k>`` (or ``rank_<k>``, ``rank-<k>``) in a path names the rank of the file.
RANK_IN_PATH = re.compile(r"rank[_-]?(\d+)")
_RANK = RANK_IN_PATH


def check_rank(r: Any, p: Path) -> int:
    """A rank read from a file (``cgtool.rank``) or its path: an integer from 0 to 2^31-1."""
    if not isinstance(r, int) or isinstance(r, bool) or not 0 <= r < 1 << 31:
        raise InvalidInputError(f"{p}: cgtool.rank is {r!r:.60}; expected an integer from 0 to 2^31-1.")
    return r


class _Probe(msgspec.Struct):
    """Just enough of a file to tell what it is and which rank wrote it (big fields stay raw)."""

    traceEvents: msgspec.Raw = msgspec.Raw()  # empty when the file has none
    nodes: msgspec.Raw = msgspec.Raw()
    cgtool: Union[dict[str, Any], None] = None


_probe = msgspec.json.Decoder(_Probe)


def rank_files(folder: Path, kind: str, *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> dict[int, Path]:
    """Per-rank ``kind`` ("trace" or "graph") files in ``folder`` and below, by rank.

    The rank comes from the file's own ``cgtool.rank`` when it records one, else from ``rank<k>``
    in its path; two files of one rank, or a file of no tellable rank, are refused."""
    found = sorted({p for pat in ("*.json", "*.json.gz") for p in folder.rglob(pat)})
    out: dict[int, Path] = {}
    for p in found:
        named = _RANK.search(str(p.relative_to(folder))) is not None
        try:
            doc = decode(read_bytes(p, max_bytes=max_bytes), p, _probe)
        except InvalidInputError as e:
            if named:  # a rank's file that cannot be read: the run is incomplete, not one rank smaller
                raise InvalidInputError(f"{e.message} (It is a per-rank file of {folder}: fix or remove it, "
                                        "or analyse the other ranks' files one by one.)") from None
            continue  # not an artifact (or not JSON) and not named for a rank: the analysis will not read it
        is_trace, is_graph = len(doc.traceEvents) > 0, len(doc.nodes) > 0 and not len(doc.traceEvents)
        if (kind == "trace" and not is_trace) or (kind == "graph" and not is_graph):
            continue
        r = (doc.cgtool or {}).get("rank")
        if r is not None:
            check_rank(r, p)
        if not isinstance(r, int):
            m = _RANK.search(str(p.relative_to(folder)))
            if m is None:
                raise InvalidInputError(
                    f"Cannot tell the rank of {p}: it records none and its path has no 'rank<k>'. "
                    "Name per-rank files trace.rank<k>.json.gz (as `cgtool trace` does under torchrun).")
            r = int(m.group(1))
        if r in out:
            raise InvalidInputError(f"Two {kind} files for rank {r} in {folder}: {out[r]} and {p}. Keep one per rank.")
        out[r] = p
    if not out:
        raise InvalidInputError(f"No {kind} files in {folder} (looked for *.json and *.json.gz, recursively).")
    return out
