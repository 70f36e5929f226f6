#!/usr/bin/env bash
# `cgtool record` of the three test programs whose recordings by scripts/gpu/record.sh are not the
# ones tests/data keeps (each check failed), checked against the programs' own counts and packed:
#   spawn_thread  the spawn worker's capture thread warms its step up first (without it, the thread's
#                 first matmul creates its cuBLAS handle inside the capture, which fails with or without
#                 cgtool: pytorch#99397); the program and its variant without warm-up (--no-warmup)
#                 are also run UNRECORDED, to show that failure is the program's, not the recorder's
#   profiler      graph A's replays before the program's own profiler, counted once by the compiled callback
#   trees         cudagraph trees' capture inputs read from CUDAGraphNode._record; torch.compile's
#                 compile workers recorded (the bootstrap stays on sys.path)
# plus the torch-hook checks of cudagraph trees and the profiler against this machine's torch.
#   bash scripts/gpu/record2.sh OUTDIR
# Writes OUTDIR/record2.log (steps headed "===== ", each step's exit status) and OUTDIR/record2.tgz
# (tests/data/record_{spawn_thread,profiler,trees}/ as scripts/pack_recordings.py packs them; the tarball
# is rewritten after each program, so what was done comes back even if a later step is cut off).
# Estimated time on one H100: ~50 s (build 10-15 s; then three lanes at once: trees ~25 s | spawn_thread
# ~6 s, profiler ~12 s | two unrecorded runs ~10 s, the hook tests ~10 s; packing ~3 s). Every step runs
# under `timeout`, each limit cut to what is left of a 115 s budget, so the script ends within ~2 minutes.
# Success: "CHECK spawn_thread: OK", "CHECK profiler: OK", "CHECK trees: OK"; unrecorded, the worker's
# RESULT says "graphs": 2, "replays": [5, 4] as the program is, and "graphs": 0 with --no-warmup
# (CUBLAS_STATUS_NOT_INITIALIZED on its stderr): that failure is the program's, not the recorder's.
set -u
OUT=${1:?usage: scripts/gpu/record2.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/record2.log"
WORK=$(mktemp -d /tmp/cgtool-record2.XXXXXX)
PACK="$WORK/pack"
mkdir -p "$PACK/tests/data"
export PYTHONUNBUFFERED=1 COLUMNS=110
exec > >(tee "$LOG") 2>&1
T0=$(date +%s)
BUDGET=115
step() { echo; echo "===== $* (at $(( $(date +%s) - T0 )) s)"; }
status() { echo "----- exit status: $1 ($2)"; }
lim() {  # a step's time limit: its own, or what is left of the budget when that is less
  local l=$1 r=$(( BUDGET - ($(date +%s) - T0) ))
  (( r < l )) && l=$r
  (( l < 1 )) && l=1
  echo "$l"
}
tarball() {  # rewritten whole: a lane's pack can run beside it, so a failed tar leaves the last one
  local t="$WORK/tgz.$BASHPID"
  tar -czf "$t" -C "$PACK" . 2>/dev/null && mv -f "$t" "$OUT/record2.tgz"
}
trap 'tarball' EXIT

step "environment"
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"
git log --oneline -1 2>/dev/null || true

step "build the compiled parts (the compiled callback counts replays: the profiler fix is in its path)"
timeout "$(lim 40)" python3 setup.py build_ext --inplace -q > "$WORK/build.txt" 2>&1
status $? build
tail -n 5 "$WORK/build.txt"
ls cgtool/capture/*.so cgtool/capture/record/*.so 2>&1

# One program a lane step: record (scripts/record_programs.sh, the same command lines as record.sh),
# check against the program's own RESULT lines, pack into $PACK/tests/data, rewrite the tarball.
record_one() {  # name, timeout_s
  local name=$1 limit=$2 dir="$WORK/rec_$1"
  mkdir -p "$dir"
  limit=$(lim "$limit")
  LANES=1 timeout "$limit" bash scripts/record_programs.sh "$dir" "$name" > "$dir/programs.txt" 2>&1
  local rc=$?
  {
    echo "== record $name: record_programs.sh exit $rc (124: cut off at ${limit} s), cgtool record exit" \
         "$(cat "$dir/record_$name.run/exit_code.txt" 2>/dev/null || echo '?'), wall $(cat "$dir/record_$name.run/wall_s.txt" 2>/dev/null) s"
    echo "-- program stdout:"; cut -c1-400 "$dir/record_$name.run/stdout.txt" 2>/dev/null
    echo "-- cgtool record's summary (last 30 lines of stderr):"; tail -n 30 "$dir/record_$name.run/stderr.txt" 2>/dev/null
    timeout "$(lim 15)" python3 scripts/pack_recordings.py "$dir" "$PACK/tests/data"
    echo "----- exit status: $? (check and pack $name)"
    tarball && echo "tarball rewritten: $(du -h "$OUT/record2.tgz" | cut -f1)"
  } > "$WORK/lane_$name.txt" 2>&1
}

step "record, check and pack: trees | spawn_thread, profiler | spawn_thread unrecorded (with and without warm-up), hook tests"
( record_one trees 60 ) &
LANE_A=$!
(
  record_one spawn_thread 25
  record_one profiler 30
) &
LANE_B=$!
(
  {
    for flag in "" --no-warmup; do  # the program as recorded (a control), and without its warm-up
      echo "== spawn_thread_worker.py $flag NOT recorded"
      (cd tests/programs && timeout "$(lim 20)" python3 spawn_thread_worker.py $flag) \
        > "$WORK/bare.out" 2> "$WORK/bare.err"
      echo "----- exit status: $? (unrecorded spawn_thread_worker.py $flag)"
      echo "-- stdout:"; cat "$WORK/bare.out"
      echo "-- stderr (the errors):"; grep -E "Error|CUBLAS|cudaError|capture" "$WORK/bare.err" | head -n 8
    done
  } > "$WORK/lane_nowarm.txt" 2>&1
  timeout "$(lim 40)" python3 -m pytest -q -p no:cacheprovider tests/test_record_torch_hooks.py \
    -k "trees or profiler" > "$WORK/hooks.txt" 2>&1
  echo "----- exit status: $? (test_record_torch_hooks -k 'trees or profiler')" >> "$WORK/hooks.txt"
) &
LANE_C=$!
wait $LANE_A $LANE_B $LANE_C
for f in lane_trees lane_spawn_thread lane_profiler lane_nowarm; do
  echo; cat "$WORK/$f.txt" 2>/dev/null || echo "($f: no output)"
done
echo; echo "== torch hooks on this machine's torch"; tail -n 6 "$WORK/hooks.txt"

step "all checks (the three packed recordings)"
timeout 15 python3 scripts/pack_recordings.py --check "$PACK/tests/data"
status $? "check all"

step "tarball"
tarball
status $? tar
tar -tzf "$OUT/record2.tgz" | head -n 40
du -h "$OUT/record2.tgz"
echo "total $(( $(date +%s) - T0 )) s"
