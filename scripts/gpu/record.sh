#!/usr/bin/env bash
# `cgtool record` on the GPU machine: every process of real programs, and the record overhead.
#   bash scripts/gpu/record.sh OUTDIR
# Writes OUTDIR/record.log (steps headed "===== step", each step's exit status) and OUTDIR/record.tgz
# (the recordings, gzipped as tests/data/record_* wants them, for checking in; the overhead figures
# as JSON; the report page of two recordings). Estimated run time on one H100: ~4 minutes
# (build 15 s, GPU tests 40 s, recordings 100 s in two lanes, GPT-2 per-graph probe 30 s, the 20 s
# serving run once bare and once recorded 55 s). The overhead steps run shortened: 3 rounds of the
# GPT-2 probe (the docs' figure took 15-25), 1 round of the 20 s serving run (the docs' took 9-11).
set -u
OUT=${1:?usage: scripts/gpu/record.sh OUTDIR}
mkdir -p "$OUT"
LOG="$OUT/record.log"
WORK=$(mktemp -d /tmp/cgtool-record-gpu.XXXXXX)
export PYTHONUNBUFFERED=1 COLUMNS=110
exec > >(tee "$LOG") 2>&1
step() { echo; echo "===== $*"; }
status() { echo "----- exit status: $1 ($2)"; }
T0=$(date +%s)
# Cut off from outside (a time limit), what was packed so far still comes back.
trap '[ -s "$OUT/record.tgz" ] || tar -czf "$OUT/record.tgz" -C "$WORK/pack" . 2>/dev/null
      (cd "$WORK" && tar -czf "$OUT/record_runs.tgz" rec/*.run 2>/dev/null)' EXIT
mkdir -p "$WORK/pack"

step "environment"
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"
python3 -c "import transformers; print('transformers', transformers.__version__)" || true
command -v torchrun || echo "torchrun: not on PATH (the recordings use python -m torch.distributed.run)"

step "build the compiled parts (_graphread, _nodecb, _columns)"
python3 setup.py build_ext --inplace -q > "$WORK/build.txt" 2>&1
status $? build
ls cgtool/capture/*.so cgtool/capture/record/*.so 2>&1

step "GPU tests of record (tests/gpu/test_record_gpu.py)"
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_record_gpu.py 2>&1 | tail -15
status "${PIPESTATUS[0]}" "gpu tests"

step "record the test programs (scripts/record_programs.sh, two at a time)"
timeout 190 bash scripts/record_programs.sh "$WORK/rec"
status $? record_programs
for f in "$WORK"/rec/record_*.run/wall_s.txt; do echo "$(basename "$(dirname "$f")" .run): $(cat "$f") s"; done

step "check each recording against the programs' own counts (pack_recordings.py --check)"
python3 scripts/pack_recordings.py --check "$WORK/rec"
status $? check

step "the summaries cgtool record printed (trees, hf_llama, chain, killed, profiler)"
for n in trees hf_llama chain killed profiler; do
  echo "--- $n"; tail -n 40 "$WORK/rec/record_$n.run/stderr.txt" 2>/dev/null
done

step "pack the recordings as tests/data/record_* (gzipped), and two report pages"
mkdir -p "$WORK/pack/tests/data"
python3 scripts/pack_recordings.py "$WORK/rec" "$WORK/pack/tests/data" > "$WORK/pack.txt" 2>&1
status $? pack
tail -n 3 "$WORK/pack.txt"
for n in trees hf_llama; do
  python3 -m cgtool report "$WORK/rec/record_$n" -o "$WORK/pack/report_$n.html" --force > /dev/null 2>&1
  status $? "report $n"
done

step "overhead per graph: the GPT-2 decode step in one process (target <= 1.15x recorder/bare, paired, input checks off; with them: printed)"
timeout 90 python3 benchmarks/probe_record_capture.py --model gpt2 --configs bare,c_noop,recorder_nochecks,recorder --rounds 3 \
  --out "$WORK/pack/probe_record_capture_gpt2.json" > "$WORK/probe.txt" 2>&1
status $? probe_record_capture
python3 - "$WORK/pack/probe_record_capture_gpt2.json" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("no result:", e); sys.exit(0)
print("device", d.get("device"), "torch", d.get("torch"), "rounds", d.get("rounds"))
print("median ms per graph:", {k: round(v, 3) for k, v in d["median_ms"].items()})
print("paired ratio to bare:", {k: round(v, 3) for k, v in d["paired_ratio_to_bare"].items()})
r = d["paired_ratio_to_bare"].get("recorder_nochecks")
print("RECORDER PER-GRAPH RATIO (--check-inputs 0)", r, "PASS" if r is not None and r <= 1.15 else "OVER 1.15x")
print("with the input checks at the default (--check-inputs 100):", d["paired_ratio_to_bare"].get("recorder"))
EOF
tail -n 5 "$WORK/probe.txt"

step "overhead on wall time: a 20 s serving run, bare and recorded (target <= 1.05x), 1 round"
timeout 75 python3 benchmarks/bench_record.py --rounds 1 --layers 24 --serve-s 20 \
  --out "$WORK/pack/bench_record_serve20.json" > "$WORK/bench.txt" 2>&1
status $? bench_record
python3 - "$WORK/pack/bench_record_serve20.json" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("no result:", e); sys.exit(0)
print("wall s:", d["wall_s"], "capture per graph s:", d["capture_instantiate_s_per_graph"])
print("phases of the recorded run:", d.get("record_phases_s"))
r = d["wall_ratio"]
print("WALL RATIO", round(r, 4), "PASS" if r <= 1.05 else "OVER 1.05x", "| per-graph capture ratio",
      round(d["capture_ratio"], 3))
EOF
tail -n 3 "$WORK/bench.txt"

step "tarball"
tar -czf "$OUT/record.tgz" -C "$WORK/pack" .
status $? tar
du -h "$OUT/record.tgz"
echo "total $(( $(date +%s) - T0 )) s"
