"""What the done-means of the input checks ask, from the recordings scripts/gpu/stale_inputs.sh made:
the two bug programs found with the lines their ``# LINE_...`` markers name (read from the programs,
not from cgtool), no finding in the correct ones and every graph of theirs that was replayed checked.
One line per program (OK/FAIL and why), exit 1 if any failed.

    python3 scripts/gpu/stale_verdict.py OUTDIR
"""
from __future__ import annotations

import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAMS = os.path.join(ROOT, "tests", "programs")


def line(program: str, marker: str) -> int:
    with open(os.path.join(PROGRAMS, program)) as f:
        for i, text in enumerate(f, 1):
            if f"# {marker}" in text:
                return i
    raise SystemExit(f"{marker} not in {program}")


def graphs(out: str, p: str) -> list[tuple[int, int, bool, str | None]]:
    """(process, graph index, checked, why not) of each graph of the recording's index files."""
    rows = []
    for idx in sorted(glob.glob(os.path.join(out, f"rec_{p}", "p*", "index.json"))):
        doc = json.load(open(idx))
        for g in doc.get("graphs", []):
            i = g.get("inputs") or {}
            rows.append((g.get("replays") or 0, len(rows), bool(i.get("checked")), i.get("why_not")))
    return rows


def verdict(out: str, p: str) -> tuple[bool, str]:
    path = os.path.join(out, f"{p}.json")
    if not os.path.exists(path):
        return False, "no summary (the recording failed: see its .log)"
    doc = json.load(open(path))
    found = doc.get("stale_inputs") or []
    gs = graphs(out, p)
    checked = sum(c for _, _, c, _ in gs)
    replayed_unchecked = [(k, why) for r, k, c, why in gs if r and not c]
    got = "; ".join(f"{f['kind']} {f.get('input')} alloc:{(f.get('allocated_at') or {}).get('line')} "
                    f"freed:{(f.get('freed_at') or {}).get('line')} "
                    f"reused_by:{((f.get('reused_by') or {}).get('allocated_at') or {}).get('line')} "
                    f"replays {f.get('first_replay')}-{f.get('last_replay')}" for f in found)
    where = f"{checked} of {len(gs)} graphs checked"
    if p == "stale_rebind":
        ok = (len(found) == 1 and found[0]["kind"] == "stale"
              and found[0]["allocated_at"]["line"] == line("stale_rebind.py", "LINE_ALLOC")
              and found[0]["last_replay"] == 40)
        want = f"stale, alloc {line('stale_rebind.py', 'LINE_ALLOC')}"
    elif p == "stale_rebind_free":
        ok = (len(found) == 1 and found[0]["kind"] in ("freed", "reused")
              and found[0]["allocated_at"]["line"] == line("stale_rebind.py", "LINE_ALLOC")
              and (found[0].get("freed_at") or {}).get("line") == line("stale_rebind.py", "LINE_REBIND")
              and (found[0]["first_replay"], found[0]["last_replay"]) == (1, 40))
        want = f"freed/reused, alloc {line('stale_rebind.py', 'LINE_ALLOC')} freed {line('stale_rebind.py', 'LINE_REBIND')}"
    elif p == "stale_freed":
        f0 = found[0] if len(found) == 1 else {}
        ok = (len(found) == 1 and f0["kind"] == "reused"
              and f0["allocated_at"]["line"] == line("stale_freed.py", "LINE_ALLOC")
              and (f0.get("freed_at") or {}).get("line") in (line("stale_freed.py", "LINE_RETURN"),
                                                             line("stale_freed.py", "LINE_CALL"))
              and ((f0.get("reused_by") or {}).get("allocated_at") or {}).get("line") == line("stale_freed.py",
                                                                                              "LINE_LOGITS")
              and (f0["first_replay"], f0["last_replay"]) == (1, 40))
        want = (f"reused, alloc {line('stale_freed.py', 'LINE_ALLOC')} freed {line('stale_freed.py', 'LINE_RETURN')} "
                f"reused by {line('stale_freed.py', 'LINE_LOGITS')}")
    else:
        ok = not found and checked > 0 and not replayed_unchecked
        want = "no finding, every replayed graph checked"
    extra = f" unchecked: {replayed_unchecked}" if replayed_unchecked else ""
    return ok, f"{where}; found [{got}]; wanted {want}{extra}"


def main() -> None:
    out = sys.argv[1]
    bad = 0
    for p in ("stale_rebind", "stale_rebind_free", "stale_freed", "inputs_inplace", "server_runner", "inputs_trees",
              "inputs_hf_generate"):
        ok, why = verdict(out, p)
        bad += not ok
        print(f"{'OK  ' if ok else 'FAIL'} {p}: {why}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
