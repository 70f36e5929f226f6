#!/usr/bin/env bash
# The engine's state-machine run on the GPU machine, in one call: PyTorch's failed-capture and
# nested-use_mem_pool tests in one process (scripts/gpu/engine_pair.py) on the engine and on torch,
# then random call sequences on both (scripts/gpu/engine_states.py). From the repository root:
#
#   bash scripts/gpu/engine_states.sh OUTDIR [SEQUENCES] [WORKERS] [SHRINK_SECONDS] [RUN_SECONDS]
#
# SEQUENCES per backend (default 2000); WORKERS: N per backend, or cgtool=N,torch=M (default
# cgtool=5,torch=9: torch's workers die often, and a replaced worker costs a CUDA context; both
# backends run at once); SHRINK_SECONDS (default 90) for shrinking the killers; RUN_SECONDS (default
# 240): no new sequence starts after it, those left are reported as not run. On one H100 (torch 2.11)
# 130 s ran 1153 engine and 814 torch sequences with 6 workers each (docs/engine.md). Writes
# OUTDIR/engine_states.log,
# OUTDIR/engine_states.json (every sequence's result, the killing programs and their shrunk form)
# and OUTDIR/engine_states_logs.tgz (each worker's stderr). Exit status: that of engine_states.py
# (0: no death, hang, broken process or leak for the engine).
set -u
OUT=${1:?usage: bash scripts/gpu/engine_states.sh OUTDIR [SEQUENCES] [WORKERS] [SHRINK_SECONDS] [RUN_SECONDS]}
N=${2:-2000}
SHRINK_S=${4:-90}
RUN_S=${5:-240}
W=${3:-cgtool=5,torch=9}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
LOGS=$(mktemp -d)
export PYTHONUNBUFFERED=1
{
  echo "===== environment"
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "| torch", torch.__version__, "| cuda", torch.version.cuda, "|", torch.cuda.get_device_name(0))'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
  echo "===== PyTorch's failed-capture then nested-use_mem_pool tests, one process each backend"
  for b in cgtool torch; do
    timeout 120 python3 scripts/gpu/engine_pair.py --backend "$b" 2>"$LOGS/pair-$b.stderr"
    echo "pair $b: exit status $? (stderr tail below)"; tail -c 600 "$LOGS/pair-$b.stderr"
  done
} >"$OUT/engine_states.log" 2>&1
cat "$OUT/engine_states.log"
echo "===== random sequences: $N per backend, $W workers per backend" | tee -a "$OUT/engine_states.log"
timeout $((RUN_S + SHRINK_S + 90)) python3 scripts/gpu/engine_states.py --sequences "$N" --workers "$W" --json "$OUT/engine_states.json" \
  --logs "$LOGS/states" --shrink-seconds "$SHRINK_S" --seconds "$RUN_S" --timeout 10 2>&1 | tee -a "$OUT/engine_states.log"
RC=${PIPESTATUS[0]}
tar -czf "$OUT/engine_states_logs.tgz" -C "$LOGS" . && rm -rf "$LOGS"
echo "engine_states.py: exit status $RC" | tee -a "$OUT/engine_states.log"
exit "$RC"
