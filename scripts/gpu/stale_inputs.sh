#!/bin/bash
# The input checks of `cgtool record` on the GPU machine, in one invocation (about 4-5 minutes on an H100):
# the snapshot probe (benchmarks/probe_snapshot_first.py), every program of tests/programs/ that the
# checks concern (two bugs, three correct, the serving runner) recorded at --check-inputs 100,
# the verdict on each (scripts/gpu/stale_verdict.py: OK/FAIL lines), and the serving benchmark
# (benchmarks/bench_record_inputs.py: bare, --check-inputs 0 and 100, fresh processes
# alternating, 3 rounds).
# Usage (from the worktree root, PYTHONPATH set): bash scripts/gpu/stale_inputs.sh OUTDIR
# NO_PROBE=1 / NO_BENCH=1 leave the probe / the benchmark out; CHECK_INPUTS=N records the programs at
# --check-inputs N instead of 100 (CHECK_INPUTS= : at cgtool record's default).
# The bug programs' recordings are packed into OUTDIR/data/record_stale_* (scripts/pack_recordings.py's
# layout), the files tests/data/record_stale_* hold: copy them there.
OUT=${1:-/tmp/stale}
CI=${CHECK_INPUTS-100}
mkdir -p "$OUT"
T0=$SECONDS
if [ -z "$NO_PROBE" ]; then
  echo "== probe (fresh process per variant: first and second snapshot, eager loop per iteration)"
  timeout 150 python3 benchmarks/probe_snapshot_first.py --out "$OUT/probe_snapshot_first.json" > "$OUT/probe.txt" 2>&1
  python3 - "$OUT/probe.txt" <<'PY'
import json, sys
for ln in open(sys.argv[1]):
    if not ln.startswith("{"):
        print(" ", ln.rstrip()[:300]); continue
    r = json.loads(ln)
    print("  %-7s ring %5s %-5s eager %s us/iter, 1st snapshot %s ms, 2nd %s ms, inductor imported by it: %s, events %s%s" % (
        r["snapshot"], r["ring"], r["context"], r.get("eager_iter_us"), r.get("first_snapshot_ms"),
        r.get("second_snapshot_ms"), r.get("inductor_after_first"), r.get("events_in_ring"),
        (", import torch._inductor %s s, raw snapshot then %s ms" % (r["import_inductor_s"], r["raw_snapshot_inductor_loaded_ms"]))
        if "import_inductor_s" in r else "" if "error" not in r else " ERROR " + r["error"][-300:]))
PY
  echo "   ($((SECONDS - T0)) s)"
fi
for spec in stale_rebind stale_rebind:--free stale_freed inputs_inplace server_runner inputs_trees inputs_hf_generate; do
  name=${spec%%:*}; args=; [ "$spec" != "$name" ] && args=${spec#*:}
  p=$name${args:+_free}
  rm -rf "$OUT/rec_$p"
  mkdir -p "$OUT/rec_$p.run"
  t=$SECONDS
  ( cd tests/programs && timeout 120 python3 -m cgtool record ${CI:+--check-inputs $CI} -o "$OUT/rec_$p" --json "$OUT/$p.json" -- python3 $name.py $args ) > "$OUT/rec_$p.run/stdout.txt" 2> "$OUT/rec_$p.run/stderr.txt"
  rc=$?; echo $rc > "$OUT/rec_$p.run/exit_code.txt"; cat "$OUT/rec_$p.run/stdout.txt" "$OUT/rec_$p.run/stderr.txt" > "$OUT/$p.log"
  echo "== $p rc=$rc ($((SECONDS - t)) s)"
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

echo "== verdict"
python3 scripts/gpu/stale_verdict.py "$OUT"
echo "   (programs done at $((SECONDS - T0)) s)"

if [ -z "$NO_BENCH" ]; then
  # BUDGET_S: seconds the whole script may take (the benchmark gets what is left, at least 60)
  left=$(( ${BUDGET_S:-100000} - (SECONDS - T0) )); [ $left -lt 60 ] && left=60; [ $left -gt 400 ] && left=400
  echo "== serving benchmark: server_runner.py 4 layers, 3 s serving; bare / --check-inputs 0 / 100; ${left} s at most"
  timeout $left python3 benchmarks/bench_record_inputs.py --rounds 3 --serve-s 3 --every 0,100 \
    --out "$OUT/bench_record_inputs.json" > "$OUT/bench.txt" 2>&1
  python3 - "$OUT/bench.txt" "$OUT/bench_record_inputs.json" <<'PY'
import json, os, sys
for ln in open(sys.argv[1]):
    if ln.startswith(("bare ", "every")):
        m, r, row = ln.split(" ", 2)
        x = json.loads(row)
        ic = x.get("input_checks") or {}
        print("  %-8s round %s wall %.2f s, served %d in the window, checks %s (%.3f s), at captures %.3f s, graphs scanned %s" % (
            m, r, x["wall_s"], x["replays"], ic.get("checks"), ic.get("check_s") or 0, ic.get("capture_s") or 0,
            sum(1 for ph in x.get("capture_phases_us") or [] if ph)))
if os.path.exists(sys.argv[2]):
    d = json.load(open(sys.argv[2]))
    for k in ("wall_s_median", "wall_ratio_vs_bare", "wall_ratio_vs_checks_off", "serving_slowdown_vs_bare", "checks_capture_s_median",
              "checks_check_s_median"):
        print("  %s: %s" % (k, {m: round(v, 3) for m, v in d.get(k, {}).items()}))
    print("  device:", d.get("device"))
PY
  echo "   (all done at $((SECONDS - T0)) s)"
fi
