#!/usr/bin/env bash
# Recordings for the detection-quality table of docs/deps.md ("How sure"), run by the coordinator on
# the GPU machine from the repository root:   bash scripts/gpu/analysis.sh OUTDIR
#
# Estimated run time: ~3.5 minutes on one H100 (16 recording jobs of ~10-15 s each, in fresh
# processes; then CPU-side checks of seconds). Writes OUTDIR/analysis.log and OUTDIR/analysis.tgz
# (the new tests/data folders, a few hundred KiB each); nothing else. Every step runs whatever the
# one before it did, and prints its exit status.
#
# What it records (scripts/record_kineto.py; each folder: trace.json.gz + graph.json from
# torch.profiler, cupti_trace.json.gz + records.json.gz from `cgtool trace`, 20 replays):
#   forkjoin_tiny_kineto_mc{1,2,def}   many small kernels on 8 streams (forkjoin.py --size 64 --depth 16)
#   {forkjoin_small,moe_small}_kineto_mc2   the small variants at 2 connections (1 and default exist)
#   {forkjoin_small,moe_small,forkjoin_tiny}_kineto_mcdef_rep{1,2}   repeated default runs (cupti only):
#                                       the run-to-run spread the default-setting target allows
# Success: every "exit status: 0"; the detection-quality table printed for the new folders; the tarball
# listed at the end. The coordinator copies the folders into tests/data/ and re-runs
# scripts/detection_quality.py for docs/deps.md.

OUT="${1:?usage: bash scripts/gpu/analysis.sh OUTDIR}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/analysis.log"
DATA="$(mktemp -d)"
: > "$LOG"

step() { echo "===== step: $*" | tee -a "$LOG"; }
run() {  # run a command, log its output and its exit status, never stop
    "$@" >> "$LOG" 2>&1
    local rc=$?
    echo "exit status: $rc ($*)" | tee -a "$LOG"
    return 0
}

step "environment"
run python3 -c "import torch, sys; print(sys.version); print(torch.__version__, torch.cuda.get_device_name(0))"
run nvidia-smi -L

step "build the compiled extensions (the trace reader's scan)"
run python3 setup.py build_ext --inplace -q

# ANALYSIS_SMALL=1: only forkjoin_small and moe_small (2 connections, and their repeats).
if [ "${ANALYSIS_SMALL:-0}" != 1 ]; then
step "record: many small kernels on 8 streams at 1, 2 and the default number of connections"
RECORD_WORKLOADS=forkjoin_tiny RECORD_SETTINGS=1,2,def RECORD_BUDGET_S=110 run python3 scripts/record_kineto.py "$DATA"
fi

# ANALYSIS_QUICK=1 (a short device call): the tiny fork/join, its repeats, nothing else.
if [ "${ANALYSIS_QUICK:-0}" != 1 ]; then
step "record: forkjoin_small and moe_small at 2 connections"
RECORD_WORKLOADS=forkjoin_small,moe_small RECORD_SETTINGS=2 RECORD_BUDGET_S=80 run python3 scripts/record_kineto.py "$DATA"
fi

step "record: two more default-setting runs of the small workloads (run-to-run spread)"
REPEAT_WORKLOADS=forkjoin_small,moe_small,forkjoin_tiny; REPEAT_BUDGET=100
[ "${ANALYSIS_QUICK:-0}" = 1 ] && REPEAT_WORKLOADS=forkjoin_tiny && REPEAT_BUDGET=40
[ "${ANALYSIS_SMALL:-0}" = 1 ] && REPEAT_WORKLOADS=forkjoin_small,moe_small && REPEAT_BUDGET=80
RECORD_WORKLOADS=$REPEAT_WORKLOADS RECORD_SETTINGS=none RECORD_REPEATS=2 RECORD_BUDGET_S=$REPEAT_BUDGET \
    run python3 scripts/record_kineto.py "$DATA"

step "what was recorded"
run du -sh "$DATA"/*

step "detection quality of the new recordings (channels and node ids removed, against their own exact answer)"
run python3 scripts/detection_quality.py "$DATA"

step "deps on each new torch.profiler trace, as a user sees it"
for d in "$DATA"/*_kineto_mc1 "$DATA"/*_kineto_mc2 "$DATA"/*_kineto_mcdef; do
    [ -f "$d/trace.json.gz" ] && run python3 -m cgtool deps "$d/trace.json.gz" --graph "$d/graph.json" --top 3
done

step "pack"
run tar czf "$OUT/analysis.tgz" -C "$DATA" .
run ls -la "$OUT/analysis.tgz"
rm -rf "$DATA"
echo "done; log in $LOG" | tee -a "$LOG"
