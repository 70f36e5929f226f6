#!/usr/bin/env bash
# GPU steps of the bench work, from the repository root on the GPU machine (one H100):
#   bash scripts/gpu/bench.sh OUTDIR            (at most ~295 s in all)
#   bash scripts/gpu/bench.sh OUTDIR --dry-run  (no GPU: the steps' CPU-side parts, to check the plumbing)
# Steps, each under its own `timeout`, every one run whatever the others did. Estimates from the
# H100 log of the earlier version (tests 76 s with 4 more torch-importing subprocesses; a process
# importing torch ~4-6 s there):
#   1. tests: tests/gpu/test_bench_gpu.py (8 tests; 3 subprocess tests = 5 torch imports):
#      ~55 s expected, limit 90 s.
#   2. probe: benchmarks/probe_capture_state.py, 10 arms x 1 round, a fresh process each (~6.5 s,
#      ~8.5 s for the 3 profiled): ~70 s expected; --budget 70 (starts no arm that would end later),
#      limit 78 s.
#   3. ratio: benchmarks/bench_vs_plain.py, 4 workloads x 2 rounds x (plain, cgtool --recaptures 3):
#      16 fresh processes, ~13 s a pair (GPT-2 ~24 s): ~125 s expected; limit what is left of 295 s
#      (125 s if the steps before take their full limits; at most 170 s), --budget 10 s under it
#      (the last pairs of round 2 skipped if it runs out).
# Success: "every step passed"; in the log, the tests' "8 passed" with the printed bench / plain
# figures, the probe's table (T0 per arm, T1, T2), the ratio table ("within 1 %": yes) and the
# per-process capture spreads; "===== step times" lists each step's exit and seconds.
# Writes OUTDIR/bench.log and OUTDIR/bench.tgz (the log, the tests' junit XML, the probe's and the
# ratio's JSON), the tarball re-packed after every step and the JSON rewritten by the scripts as
# they go, so a step cut off loses only its unfinished part. Exits 1 listing the failed steps.
set -u
OUTDIR=${1:?usage: bash scripts/gpu/bench.sh OUTDIR [--dry-run]}
DRY=0
case "${2:-}" in --dry-run) DRY=1;; "") ;; *) echo "unknown option: $2 (only --dry-run)" >&2; exit 2;; esac
TOTAL=295
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
DATA=$(mktemp -d /tmp/cgtool-bench-data.XXXXXX)
trap 'rm -rf "$DATA"' EXIT
: > "$OUTDIR/bench.log"
exec > >(tee -a "$OUTDIR/bench.log") 2>&1
export PYTHONUNBUFFERED=1 COLUMNS=160
export PYTHONPATH=${PYTHONPATH:-/tmp/site:$PWD}
FAILED=()
TIMES=()

pack() {  # the log and every data file so far, into OUTDIR/bench.tgz (atomically)
  cp "$OUTDIR/bench.log" "$DATA/bench.log"
  tar -czf "$OUTDIR/bench.tgz.tmp" -C "$DATA" . && mv "$OUTDIR/bench.tgz.tmp" "$OUTDIR/bench.tgz"
}

step() {  # step NAME LIMIT_S COMMAND...: run it under timeout, print its exit status and time, re-pack
  local name=$1 limit=$2; shift 2
  echo; echo "===== $name (limit ${limit} s, $SECONDS s into the script)"; local t0=$SECONDS
  timeout -k 5 "$limit" "$@"; local rc=$?
  local took=$((SECONDS - t0))
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && echo "----- $name: cut off at its limit of ${limit} s"
  echo "----- $name: exit $rc ($took s)"
  TIMES+=("$(printf '%-8s exit %3d  %4d s (limit %d s)' "$name" "$rc" "$took" "$limit")")
  [ "$rc" -eq 0 ] || FAILED+=("$name (exit $rc)")
  pack
}

GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
TORCH=$(python3 -c 'import importlib.metadata as m; print(m.version("torch"))' 2>&1 | tail -1)
echo "===== bench.sh, $(date -u +%FT%TZ), ${GPU:-no GPU seen by nvidia-smi}, torch $TORCH$([ $DRY = 1 ] && echo ', DRY RUN')"

if [ $DRY = 1 ]; then
  step tests 60 python3 -m pytest -q --collect-only tests/gpu/test_bench_gpu.py -p no:cacheprovider
  step probe 30 python3 benchmarks/probe_capture_state.py --budget 70 --dry-run
  step ratio 30 python3 benchmarks/bench_vs_plain.py --rounds 2 --blocks 10 --recaptures 3 --budget 115 --dry-run \
    --workloads chain,gpt2_decode,transformer_block,one_kernel
else
  step tests 90 python3 -m pytest -q -rA -m gpu tests/gpu/test_bench_gpu.py -p no:cacheprovider \
    --junitxml "$DATA/bench_gpu_tests.xml"
  step probe 78 python3 benchmarks/probe_capture_state.py --rounds 1 --replays 200 --blocks 20 --budget 70 \
    --json "$DATA/probe_capture_state_h100.json"
  left=$((TOTAL - SECONDS - 2))
  [ "$left" -gt 170 ] && left=170
  [ "$left" -lt 20 ] && left=20
  step ratio "$left" python3 benchmarks/bench_vs_plain.py --rounds 2 --blocks 10 --recaptures 3 \
    --workloads chain,gpt2_decode,transformer_block,one_kernel --budget $((left - 10)) \
    --json "$DATA/bench_vs_plain_h100.json"
fi

echo
echo "===== step times ($SECONDS s in all)"
printf '  %s\n' "${TIMES[@]}"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "===== bench.sh: ${#FAILED[@]} step(s) failed:"
  printf '  %s\n' "${FAILED[@]}"
  pack
  exit 1
fi
echo "===== bench.sh: every step passed"
pack
