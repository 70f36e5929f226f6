#!/usr/bin/env bash
# Everything cgtool runs on the GPU machine in one call, from the repository root:
#   bash scripts/gpu_run.sh OUTDIR
# Wheels for packages the machine lacks (cupti-python, msgspec) are expected in .whl/ (see README).
# Every step runs; each prints its exit status, and the script exits 1 listing the steps that failed
# (a step fails on an exit status other than the one it expects: 0, or 1 for the gate's regression).
set -u
OUTDIR=${1:-/tmp/gpu-out}
mkdir -p "$OUTDIR"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 COLUMNS=110
FAILED=()

# expect CODE NAME COMMAND: run COMMAND (a bash command line; pipelines fail on any part), print its
# exit status, and record a failure when it is not CODE.
expect() {
  local want=$1 name=$2 cmd=$3
  echo; echo "===== $name"
  bash -o pipefail -c "$cmd"; local rc=$?
  echo "----- $name: exit $rc"
  [ "$rc" -eq "$want" ] || FAILED+=("$name (exit $rc, expected $want)")
}
step() { expect 0 "$@"; }

step "doctor" "python3 -m cgtool doctor"
step "GPU tests" "python3 -m pytest -q -m gpu tests -p no:cacheprovider 2>&1 | tail -15"
for w in chain forkjoin transformer_block train_step resnet50 gpt2_decode; do
  step "capture $w" "python3 -m cgtool capture sample_workloads/$w.py -o '$OUTDIR/bundles/$w' --force 2>&1 | { grep -v -i warn || true; }"
done
step "trace (CUPTI) forkjoin" "python3 -m cgtool trace sample_workloads/forkjoin.py -o '$OUTDIR/fj.json.gz' --force"
step "trace (CUPTI) forkjoin, one connection" "python3 -m cgtool trace sample_workloads/forkjoin.py -o '$OUTDIR/fj1.json.gz' --max-connections 1 --force"
# one connection serializes the branches: fake dependencies, so --fail-on-fake 0 exits 1
expect 1 "deps of the one-connection trace (--fail-on-fake 0)" "python3 -m cgtool deps '$OUTDIR/fj1.json.gz' --top 3 --fail-on-fake 0"
step "torch.profiler fallback" "python3 -m cgtool trace sample_workloads/chain.py -o '$OUTDIR/chain_torch.json.gz' --profiler torch --force -- --kernels 40"
step "inferred match (deps of the torch.profiler trace)" "python3 -m cgtool deps '$OUTDIR/chain_torch.json.gz' --top 2 | tail -8"
step "topo with measured durations" "python3 -m cgtool topo '$OUTDIR/bundles/forkjoin/graph.json' --trace '$OUTDIR/fj.json.gz' 2>&1 | tail -4"
step "bench every sample workload" "python3 -m cgtool bench sample_workloads/{chain,forkjoin,transformer_block,train_step,resnet50,gpt2_decode}.py --json '$OUTDIR/bench.json' --force"
step "gate demo: baseline" "python3 -m cgtool bench sample_workloads/chain.py --save-baseline '$OUTDIR/base.json' --no-eager --force >/dev/null"
step "gate demo: unchanged rerun passes" "python3 -m cgtool bench sample_workloads/chain.py --baseline '$OUTDIR/base.json' --no-eager"
expect 1 "gate demo: 7.5% more work fails" "python3 -m cgtool bench sample_workloads/chain.py --baseline '$OUTDIR/base.json' --no-eager --args '--kernels 430'"
step "dot --driver" "python3 -m cgtool dot sample_workloads/transformer_block.py --driver -o '$OUTDIR/tb_driver.dot' --force && head -c 300 '$OUTDIR/tb_driver.dot' && echo"
step "dot --driver-flags" "python3 -m cgtool dot sample_workloads/transformer_block.py --driver --driver-flags kernel,handles -o '$OUTDIR/tb_k.dot' --force && wc -c '$OUTDIR/tb_driver.dot' '$OUTDIR/tb_k.dot'"
step "bench --cold-cache" "python3 -m cgtool bench sample_workloads/transformer_block.py --cold-cache --runs 1 --replays 200"
step "bench --per-replay" "python3 -m cgtool bench sample_workloads/chain.py --per-replay --runs 1 --replays 200 --no-eager"
step "bench --recaptures" "python3 -m cgtool bench sample_workloads/chain.py --recaptures 5 --runs 1 --replays 2000 --no-eager"
step "demo (GPU path)" "python3 -m cgtool demo 2>&1 | tail -15"
for b in bench_export bench_harness_overhead bench_capture_overhead bench_trace_overhead; do
  step "benchmark $b" "python3 benchmarks/$b.py"
done
step "trace every sample workload, validated" "python3 scripts/validate_traces.py '$OUTDIR/traces'"

echo
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "===== ${#FAILED[@]} step(s) failed:"
  printf '  %s\n' "${FAILED[@]}"
  exit 1
fi
echo "===== every step passed"
