#!/usr/bin/env bash
# The multi-GPU run, on the 2-GPU machine, from the repository root:  bash scripts/gpu_run_2gpu.sh OUTDIR
# NVLink multicast stays off (it can take a shared host's GPUs out of service).
set -u
OUTDIR=${1:-/tmp/mgpu}
mkdir -p "$OUTDIR/traces"  # cgtool creates no folder for an output file
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m cgtool capture sample_workloads/tp_mlp.py --nproc-per-node 2 -o "$OUTDIR/bundle" --force
python3 -m cgtool trace sample_workloads/tp_mlp.py --nproc-per-node 2 -o "$OUTDIR/traces/trace.json.gz" --force
python3 -m cgtool deps "$OUTDIR/traces" --json "$OUTDIR/deps.json" --force
python3 -m cgtool topo "$OUTDIR/bundle"
python3 -m cgtool bench sample_workloads/tp_mlp.py --nproc-per-node 2 --replays 500 --json "$OUTDIR/bench.json" --force
