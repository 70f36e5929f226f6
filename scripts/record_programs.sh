#!/usr/bin/env bash
# Record the test programs (tests/programs/) with `cgtool record` on a GPU machine.
#   scripts/record_programs.sh OUTDIR [NAME...]     (no NAME: all of them)
# Per program: OUTDIR/record_<name>/ (the recording), plus stdout.txt, stderr.txt, exit_code.txt and
# wall_s.txt beside it in OUTDIR/record_<name>.run/. Programs run two at a time (LANES=1 for one at a
# time). tests/data/record_* are these folders, gzipped (scripts/pack_recordings.py), which also checks
# each recording against the program's own RESULT lines (--check).
set -u
OUT=${1:?usage: record_programs.sh OUTDIR [NAME...]}
shift
mkdir -p "$OUT"
PY=${PYTHON:-python3}
LANES=${LANES:-2}
ONLY=" $* "
want() { [ "$ONLY" = "  " ] || [[ "$ONLY" == *" $1 "* ]]; }
rec() {  # name, extra cgtool args..., -- program args
  local name=$1; shift
  want "$name" || return 0
  mkdir -p "$OUT/record_$name.run"
  local t0; t0=$(date +%s.%N)
  $PY -m cgtool record -o "$OUT/record_$name" --force "$@" \
    > "$OUT/record_$name.run/stdout.txt" 2> "$OUT/record_$name.run/stderr.txt"
  echo $? > "$OUT/record_$name.run/exit_code.txt"
  awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f\n", b - a }' > "$OUT/record_$name.run/wall_s.txt" || true
  { echo "== $name: exit $(cat "$OUT/record_$name.run/exit_code.txt")"; tail -n 30 "$OUT/record_$name.run/stderr.txt"; } \
    > "$OUT/record_$name.run/summary.txt"
}
P=tests/programs
TORCHRUN=(torchrun)
command -v torchrun > /dev/null || TORCHRUN=($PY -m torch.distributed.run)
lane1() {
  rec hf_llama -- python $P/hf_llama_static.py
  rec spawn_thread -- python $P/spawn_thread_worker.py
  rec chain --trace-replays 2 -- python $P/subprocess_chain.py
  rec profiler -- python $P/own_profiler.py
  rec server --trace-replays 3 -- python $P/server_runner.py
  rec train --trace-replays 3 -- python $P/train_graphed.py
  rec crash --trace-replays 2 -- python $P/crash_after_two.py
  rec nograph -- python $P/no_graph.py
  rec missing -- python $P/not_there.py
}
lane2() {
  rec trees --trace-replays 2 -- python $P/cudagraph_trees_reshape.py
  rec forkserver -- python $P/forkserver_pool.py
  rec torchrun -- "${TORCHRUN[@]}" --nproc-per-node 2 --master-port 29517 $P/torchrun_two_ranks.py
  rec killed -- python $P/worker_killed.py
  rec compiled --trace-replays 3 -- python $P/compiled_model.py
  CGTOOL_RECORD_SUBSCRIBER=cupti-python rec server_pycb -- python $P/server_runner.py
  rec ranks --nproc-per-node 2 -- python $P/server_runner.py
  # CUPTI held by another subscriber before the program starts (a sitecustomize standing in for a profiler)
  if want busy; then
    mkdir -p "$OUT/busy_site"
    printf 'from cupti import cupti\n_s = cupti.subscribe(lambda *a: None, None)\n' > "$OUT/busy_site/sitecustomize.py"
    PYTHONPATH="$OUT/busy_site:${PYTHONPATH:-}" rec busy -- python $P/server_runner.py
    rm -rf "$OUT/busy_site"
  fi
}
if [ "$LANES" = 1 ]; then lane1; lane2; else lane1 & lane2 & wait; fi
for s in "$OUT"/record_*.run/summary.txt; do cat "$s"; done
# A `cgtool capture` bundle: its exports carry the same per-node source block (tests/data/capture_sources)
if want capture; then
  $PY -m cgtool capture sample_workloads/transformer_block.py -o "$OUT/capture_transformer_block" --force \
    > "$OUT/capture_transformer_block.log" 2>&1
  echo "== capture transformer_block: exit $?"; tail -n 5 "$OUT/capture_transformer_block.log"
fi
