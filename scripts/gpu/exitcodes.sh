#!/usr/bin/env bash
# Exit codes on the GPU machine, from the repository root:  bash scripts/gpu/exitcodes.sh OUTDIR
# About 2 minutes on one H100: two torch processes, five torchrun jobs of 2 ranks (both ranks on
# cuda:0 on a 1-GPU machine: the workloads here need no process group), three of them stopped by a
# signal once both ranks are inside the workload's setup(); a run still going 45 s after its signal is
# reported FAILED and killed (at most about 4.5 minutes then).
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

# A workload whose setup records its pid (SLEEPY_MARKS/rank<R>) and sleeps: the signals below are
# sent once every rank is inside it.
printf 'import os, time\n\ndef setup():\n    with open(os.path.join(os.environ["SLEEPY_MARKS"], "rank" + os.environ["RANK"]), "w") as f:\n        f.write(str(os.getpid()))\n    time.sleep(120)\n    return lambda: None\n' > "$WORK/sleepy.py"
# Runs "$@" in a session of its own, with SIGINT at its default (a script's background job starts with
# it ignored). `exec`: the background job's pid ($!) is then cgtool itself, the session's leader, so
# that `kill -- -$pid` reaches its process group (without it, $! is a subshell of this script and
# cgtool a child of it in another group).
session() { exec python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])' "$@"; }
# signal_capture TAG SIGNAL GROUP|ALONE: start a 2-rank capture of sleepy.py, wait (at most 120 s)
# until both ranks are in setup(), send SIGNAL to cgtool's process group or to cgtool alone, and wait
# at most 45 s for cgtool to end (a run still going then is FAILED, and killed). Sets $rc.
signal_capture() {
  local tag=$1 sig=$2 to=$3 marks="$WORK/$1.marks" pid t0 i
  mkdir -p "$marks"
  SLEEPY_MARKS="$marks" session python3 -m cgtool capture "$WORK/sleepy.py" --nproc-per-node 2 -o "$WORK/$tag" >> "$LOG" 2>&1 &
  pid=$!
  for i in $(seq 1 240); do [ -s "$marks/rank0" ] && [ -s "$marks/rank1" ] && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  echo "rank pids in setup(): $(for f in "$marks"/rank*; do [ -s "$f" ] && printf '%s ' "$(cat "$f")"; done)(cgtool $pid, its session $(ps -o sid= -p "$pid" 2>/dev/null | tr -d ' '))" >> "$LOG"
  [ -s "$marks/rank0" ] && [ -s "$marks/rank1" ] || echo "FAILED: the ranks did not reach setup() (signal sent anyway)" >> "$LOG"
  t0=$(date +%s.%N)
  if [ "$to" = GROUP ]; then kill -"$sig" -- -"$pid"; else kill -"$sig" "$pid"; fi || echo "FAILED: kill -$sig ($to) reached no process" >> "$LOG"
  for i in $(seq 1 225); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "FAILED: cgtool still running 45 s after SIG$sig; killing its process group" >> "$LOG"
    kill -KILL -- -"$pid"
  fi
  wait "$pid"; rc=$?
  echo "ended $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)") s after SIG$sig" >> "$LOG"
}

step "Ctrl-C (SIGINT to the process group, as a terminal sends it) during a torchrun capture: exit 130"
signal_capture intr INT GROUP
expect "capture --nproc-per-node 2, Ctrl-C" 130 $rc
left_behind "$WORK/intr"

step "SIGINT to cgtool alone during a torchrun capture: exit 130 (after cgtool's 5 s grace), ranks stopped"
signal_capture sigint INT ALONE
expect "capture --nproc-per-node 2, SIGINT to cgtool" 130 $rc
left_behind "$WORK/sigint"

step "SIGTERM to cgtool alone during a torchrun capture: exit 143, ranks stopped"
signal_capture term TERM ALONE
expect "capture --nproc-per-node 2, SIGTERM" 143 $rc
left_behind "$WORK/term"

step "summary"
echo "$fails step(s) failed" >> "$LOG"
rm -rf "$WORK"
exit 0
