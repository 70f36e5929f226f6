#!/usr/bin/env bash
# Exit codes on the GPU machine, from the repository root:  bash scripts/gpu/exitcodes.sh OUTDIR
# About 1.5 minutes on one H100: two torch processes, four torchrun jobs of 2 ranks (both ranks on
# cuda:0 on a 1-GPU machine: the workloads here need no process group), two of them stopped by a
# signal after 12 s.
# Success: every step prints "ok" (expected exit code seen, no rank left running);
# "FAILED" names the step. Writes OUTDIR/exitcodes.log only.
set -u
OUTDIR=${1:-/tmp/exitcodes-out}
mkdir -p "$OUTDIR"
LOG="$OUTDIR/exitcodes.log"
: > "$LOG"
export PYTHONPATH=${PYTHONPATH:-$PWD} PYTHONUNBUFFERED=1 COLUMNS=110
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BROKEN=sample_workloads/broken/host_sync_item.py
WORK=$(mktemp -d /tmp/exitcodes-XXXXXX)
fails=0

step() { echo; echo "===== $*"; } >> "$LOG"
expect() {  # expect NAME WANT GOT
  if [ "$3" = "$2" ]; then echo "ok: $1 exited $3" >> "$LOG"; else echo "FAILED: $1 exited $3, expected $2" >> "$LOG"; fails=$((fails + 1)); fi
}
left_behind() {  # any process whose command line holds the tag $1 (ranks, torchrun)
  sleep 2
  if pgrep -f -- "$1" >/dev/null; then
    echo "FAILED: processes left running:" >> "$LOG"; pgrep -af -- "$1" >> "$LOG"; fails=$((fails + 1))
    pkill -9 -f -- "$1"
  else
    echo "ok: no process left running" >> "$LOG"
  fi
}

step "environment"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch; print("torch", torch.__version__)'; } >> "$LOG" 2>&1

step "capture of a host-sync sample in one process: exit 3"
python3 -m cgtool capture "$BROKEN" -o "$WORK/one" >> "$LOG" 2>&1
expect "capture (1 process)" 3 $?

step "capture of the same sample with --nproc-per-node 2 (torchrun, both ranks on cuda:0 if one GPU): exit 3"
python3 -m cgtool capture "$BROKEN" --nproc-per-node 2 -o "$WORK/two" >> "$LOG" 2>&1
expect "capture --nproc-per-node 2" 3 $?
left_behind "$WORK/two"

step "trace of the same sample with --nproc-per-node 2: exit 3"
python3 -m cgtool trace "$BROKEN" --nproc-per-node 2 -o "$WORK/trace.json.gz" >> "$LOG" 2>&1
expect "trace --nproc-per-node 2" 3 $?

step "the demo's GPU path on the broken sample: its capture step's code, 3"
python3 -m cgtool demo --workload "$BROKEN" >> "$LOG" 2>&1
expect "demo --workload (broken)" 3 $?

# A workload whose setup sleeps: the signals below arrive while every rank is inside it.
printf 'import time\n\ndef setup():\n    time.sleep(120)\n    return lambda: None\n' > "$WORK/sleepy.py"
# In its own session, with SIGINT at its default (a script's background job starts with it ignored).
session() { python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])' "$@"; }

step "Ctrl-C (SIGINT to the process group, as a terminal sends it) during a torchrun capture: exit 130"
session python3 -m cgtool capture "$WORK/sleepy.py" --nproc-per-node 2 -o "$WORK/intr" >> "$LOG" 2>&1 &
pid=$!
sleep 12
kill -INT -- -"$pid"
wait "$pid"
expect "capture --nproc-per-node 2, Ctrl-C" 130 $?
left_behind "$WORK/intr"

step "SIGTERM to cgtool alone during a torchrun capture: exit 143, ranks stopped"
session python3 -m cgtool capture "$WORK/sleepy.py" --nproc-per-node 2 -o "$WORK/term" >> "$LOG" 2>&1 &
pid=$!
sleep 12
kill -TERM "$pid"
wait "$pid"
expect "capture --nproc-per-node 2, SIGTERM" 143 $?
left_behind "$WORK/term"

step "summary"
echo "$fails step(s) failed" >> "$LOG"
rm -rf "$WORK"
exit 0
