#!/bin/bash
# The input checks of `cgtool record` on the GPU machine: the allocator probe, every program of
# tests/programs/ that the checks concern (two bugs, three correct), and the findings each printed.
# Usage (from the worktree root, PYTHONPATH set): bash scripts/gpu/stale_inputs.sh OUTDIR
# The two bug programs' recordings are packed into OUTDIR/data/record_stale_* (scripts/pack_recordings.py's
# layout), the files tests/data/record_stale_* hold: copy them there.
OUT=${1:-/tmp/stale}
mkdir -p "$OUT"
[ -n "$NO_PROBE" ] || python3 benchmarks/probe_allocator_history.py --out "$OUT/probe.json" > "$OUT/probe.txt" 2>&1 || tail -20 "$OUT/probe.txt"
for spec in stale_rebind stale_rebind:--free stale_freed inputs_inplace server_runner inputs_trees inputs_hf_generate; do
  name=${spec%%:*}; args=; [ "$spec" != "$name" ] && args=${spec#*:}
  p=$name${args:+_free}
  rm -rf "$OUT/rec_$p"
  mkdir -p "$OUT/rec_$p.run"
  ( cd tests/programs && timeout 120 python3 -m cgtool record --check-inputs 100 -o "$OUT/rec_$p" --json "$OUT/$p.json" -- python3 $name.py $args ) > "$OUT/rec_$p.run/stdout.txt" 2> "$OUT/rec_$p.run/stderr.txt"
  rc=$?; echo $rc > "$OUT/rec_$p.run/exit_code.txt"; cat "$OUT/rec_$p.run/stdout.txt" "$OUT/rec_$p.run/stderr.txt" > "$OUT/$p.log"
  echo "== $p rc=$rc"
  python3 - "$OUT/rec_$p" <<'PY'
import json, sys, glob, os
for idx in sorted(glob.glob(os.path.join(sys.argv[1], "p*", "index.json"))):
    d = json.load(open(idx))
    ic = d.get("input_checks") or {}
    print(" ", os.path.basename(os.path.dirname(idx)), "checks", ic.get("checks"), "check_s %.4f" % (ic.get("check_s") or 0),
          "capture_s %.4f" % (ic.get("capture_s") or 0), "history", ic.get("history"), "lost", ic.get("history_lost"),
          "unmatched", ic.get("replays_not_matched"), "errors", ic.get("errors"))
    for gi, g in enumerate(d.get("graphs", [])):
        i = g.get("inputs") or {}
        if gi < 3:  # the first graphs: what the scan found and where its time went
            print("   graph", g.get("label"), "replays", g.get("replays"), "ext", i.get("external_blocks"), "pool_ptrs",
                  i.get("pool_pointers"), "free_ptrs", i.get("free_pointers_at_capture"), "scan", i.get("scan"),
                  "scan_s %.4f" % (i.get("scan_s") or 0), "why_not", i.get("why_not"))
        for f in i.get("findings", []):
            inp = f["input"]
            print("     FINDING", f["kind"], inp.get("name"), inp.get("shape"), inp.get("dtype"), inp.get("bytes"),
                  "alloc", (inp.get("allocated_at") or {}).get("line"), "freed", (f.get("freed_at") or {}).get("line"),
                  "reused_by", ((f.get("reused_by") or {}).get("allocated_at") or {}).get("line"),
                  "replays", f["first_replay"], f["first_replay_exact"], f["may_start_at"], f["last_replay"],
                  "reallocs", f.get("reallocs"), "unchanged", f.get("unchanged_between"))
        for b in i.get("external", []):
            if b.get("reallocs"):
                print("     SUSPECT", b.get("name"), b.get("bytes"), b.get("reallocs"), b.get("unchanged_intervals"),
                      b.get("written_intervals"), (b.get("allocated_at") or {}).get("line"))
PY
  grep -v "^RESULT" "$OUT/$p.log" | grep -i "graph #\|no graph read\|not checked\|error\|Traceback" | cut -c1-400 | head -6
done

mkdir -p "$OUT/data"
for p in stale_rebind stale_rebind_free stale_freed inputs_inplace; do
  python3 -c "import sys; sys.path.insert(0, 'scripts'); from pathlib import Path; from pack_recordings import pack; pack(Path(sys.argv[1]), Path(sys.argv[2]))" \
    "$OUT/rec_$p" "$OUT/data/record_stale_${p#stale_}" && cp "$OUT/$p.json" "$OUT/data/record_stale_${p#stale_}/summary.json"
done
