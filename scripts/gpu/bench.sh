#!/usr/bin/env bash
# GPU steps of the bench work, from the repository root on the GPU machine (one H100):
#   bash scripts/gpu/bench.sh OUTDIR [part1|part2|all]      (default: all)
# part1, about 3.5-4 minutes: the bench GPU tests (tests/gpu/test_bench_gpu.py: bench vs a plain
#   event loop, replay counting, --cold-cache, --recaptures, the check after capture, the pool
#   record attributes to each graph) and benchmarks/probe_capture_state.py (17 arms x 2 rounds of
#   fresh processes: why one kept output moves the chain's replay time).
# part2, about 4 minutes: benchmarks/bench_vs_plain.py (chain, one kernel, transformer block,
#   GPT-2 decode: plain torch.cuda.graph loop vs cgtool bench, fresh processes, 3 rounds of 10
#   blocks of 1,000 replays, then --recaptures 5 of each) and `cgtool bench --recaptures 5` on the chain.
# Writes OUTDIR/bench.log (appended to by each part) and OUTDIR/bench.tgz (JSON and logs of every
# part run so far into this OUTDIR). Every step runs; the script exits 1 listing the failed steps.
set -u
OUTDIR=${1:?usage: bash scripts/gpu/bench.sh OUTDIR [part1|part2|all]}
PART=${2:-all}
case "$PART" in part1|part2|all) ;; *) echo "unknown part: $PART (part1, part2 or all)" >&2; exit 2;; esac
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
DATA=$(mktemp -d /tmp/cgtool-bench-data.XXXXXX)
trap 'rm -rf "$DATA"' EXIT
[ -f "$OUTDIR/bench.tgz" ] && tar -xzf "$OUTDIR/bench.tgz" -C "$DATA"  # keep what an earlier part wrote
exec > >(tee -a "$OUTDIR/bench.log") 2>&1
export PYTHONUNBUFFERED=1 COLUMNS=160
export PYTHONPATH=${PYTHONPATH:-/tmp/site:$PWD}
FAILED=()

step() {  # step NAME COMMAND...: run it, print its exit status, remember a failure
  local name=$1; shift
  echo; echo "===== $name"; local t0=$SECONDS
  "$@"; local rc=$?
  echo "----- $name: exit $rc ($((SECONDS - t0)) s)"
  [ "$rc" -eq 0 ] || FAILED+=("$name (exit $rc)")
}

echo "===== bench.sh $PART, $(date -u +%FT%TZ), $(python3 -c 'import torch; print(torch.cuda.get_device_name(), torch.__version__)' 2>&1)"

if [ "$PART" = part1 ] || [ "$PART" = all ]; then
  step "bench GPU tests" python3 -m pytest -q -rA -m gpu tests/gpu/test_bench_gpu.py -p no:cacheprovider \
    --junitxml "$DATA/bench_gpu_tests.xml"
  step "probe: capture state (17 arms x 2 rounds, fresh processes)" \
    python3 benchmarks/probe_capture_state.py --rounds 2 --replays 200 --blocks 20 --json "$DATA/probe_capture_state_h100.json"
fi

if [ "$PART" = part2 ] || [ "$PART" = all ]; then
  step "ratio: plain torch.cuda.graph loop vs cgtool bench (3 rounds, 10 blocks of 1,000; --recaptures 5)" \
    python3 benchmarks/bench_vs_plain.py --rounds 3 --blocks 10 --per 1000 --recaptures 5 --json "$DATA/bench_vs_plain_h100.json"
  step "cgtool bench --recaptures 5 on the chain" \
    python3 -m cgtool bench sample_workloads/chain.py --runs 1 --recaptures 5 --replays 2000 --no-eager \
    --json "$DATA/bench_recaptures_chain_h100.json" --force
fi

cp "$OUTDIR/bench.log" "$DATA/bench.log"
tar -czf "$OUTDIR/bench.tgz.tmp" -C "$DATA" . && mv "$OUTDIR/bench.tgz.tmp" "$OUTDIR/bench.tgz"
echo
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "===== bench.sh $PART: ${#FAILED[@]} step(s) failed:"
  printf '  %s\n' "${FAILED[@]}"
  exit 1
fi
echo "===== bench.sh $PART: every step passed"
