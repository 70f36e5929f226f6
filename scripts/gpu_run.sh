#!/usr/bin/env bash
# Everything cgtool runs on the GPU machine in one call, from the repository root:
#   bash scripts/gpu_run.sh OUTDIR
# Wheels for packages the machine lacks (cupti-python, msgspec) are expected in .whl/ (see README).
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
step() { echo; echo "===== $*"; }
step "doctor"; python3 -m cgtool doctor
step "GPU tests"; python3 -m pytest -q -m gpu tests -p no:cacheprovider 2>&1 | tail -15
step "capture every sample workload"
for w in chain forkjoin transformer_block train_step resnet50 gpt2_decode; do
  python3 -m cgtool capture sample_workloads/$w.py -o "$OUTDIR/bundles/$w" --force 2>&1 | grep -v -i warn
  echo "rc=$?"
done
step "trace (CUPTI) + deps"
python3 -m cgtool trace sample_workloads/forkjoin.py -o "$OUTDIR/fj.json.gz" --force
python3 -m cgtool trace sample_workloads/forkjoin.py -o "$OUTDIR/fj1.json.gz" --max-connections 1 --force
python3 -m cgtool deps "$OUTDIR/fj1.json.gz" --top 3
step "torch.profiler fallback + inferred match"
python3 -m cgtool trace sample_workloads/chain.py -o "$OUTDIR/chain_torch.json.gz" --profiler torch --force -- --kernels 40
python3 -m cgtool deps "$OUTDIR/chain_torch.json.gz" --top 2 | tail -8
step "topo with measured durations"
python3 -m cgtool topo "$OUTDIR/bundles/forkjoin/graph.json" --trace "$OUTDIR/fj.json.gz" 2>&1 | tail -4
step "bench every sample workload"
python3 -m cgtool bench sample_workloads/{chain,forkjoin,transformer_block,train_step,resnet50,gpt2_decode}.py --json "$OUTDIR/bench.json" --force
step "gate demo: baseline, unchanged rerun, 7.5% more work"
python3 -m cgtool bench sample_workloads/chain.py --save-baseline "$OUTDIR/base.json" --no-eager --force >/dev/null
python3 -m cgtool bench sample_workloads/chain.py --baseline "$OUTDIR/base.json" --no-eager; echo "unchanged rerun: exit $?"
python3 -m cgtool bench sample_workloads/chain.py --baseline "$OUTDIR/base.json" --no-eager --args "--kernels 430"; echo "7.5% slower: exit $?"
step "dot --driver"
python3 -m cgtool dot sample_workloads/transformer_block.py --driver -o "$OUTDIR/tb_driver.dot" --force && head -c 300 "$OUTDIR/tb_driver.dot"; echo
python3 -m cgtool dot sample_workloads/transformer_block.py --driver --driver-flags kernel,handles -o "$OUTDIR/tb_k.dot" --force && wc -c "$OUTDIR/tb_driver.dot" "$OUTDIR/tb_k.dot"
step "bench --cold-cache and --per-replay"
python3 -m cgtool bench sample_workloads/transformer_block.py --cold-cache --runs 1 --replays 200
python3 -m cgtool bench sample_workloads/chain.py --per-replay --runs 1 --replays 200 --no-eager
step "demo (GPU path)"
python3 -m cgtool demo 2>&1 | tail -15
step "benchmarks"
python3 benchmarks/bench_export.py
python3 benchmarks/bench_harness_overhead.py
python3 benchmarks/bench_capture_overhead.py
python3 benchmarks/bench_trace_overhead.py
step "trace every sample workload, validated"
python3 scripts/validate_traces.py "$OUTDIR/traces"
