#!/usr/bin/env bash
# Record the test programs (tests/programs/) with `cgtool record` on a GPU machine.
#   scripts/record_programs.sh OUTDIR
# Per program: OUTDIR/record_<name>/ (the recording), plus stdout.txt, stderr.txt, exit_code.txt
# beside it in OUTDIR/record_<name>.run/. tests/data/record_* are these folders, gzipped
# (scripts/pack_recordings.py).
set -u
OUT=${1:?usage: record_programs.sh OUTDIR}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
rec() {  # name, extra cgtool args..., -- program args
  local name=$1; shift
  mkdir -p "$OUT/record_$name.run"
  $PY -m cgtool record -o "$OUT/record_$name" --force "$@" \
    > "$OUT/record_$name.run/stdout.txt" 2> "$OUT/record_$name.run/stderr.txt"
  echo $? > "$OUT/record_$name.run/exit_code.txt"
  echo "== $name: exit $(cat "$OUT/record_$name.run/exit_code.txt")"
  tail -n 25 "$OUT/record_$name.run/stderr.txt"
}
rec server --trace-replays 3 -- python tests/programs/server_runner.py
rec train --trace-replays 3 -- python tests/programs/train_graphed.py
rec compiled --trace-replays 3 -- python tests/programs/compiled_model.py
rec crash --trace-replays 2 -- python tests/programs/crash_after_two.py
CGTOOL_RECORD_SUBSCRIBER=cupti-python rec server_pycb -- python tests/programs/server_runner.py
rec ranks --nproc-per-node 2 -- python tests/programs/server_runner.py  # both ranks finish: no early kill
rec nograph -- python tests/programs/no_graph.py
rec missing -- python tests/programs/not_there.py
# CUPTI held by another subscriber before the program starts (a sitecustomize standing in for a profiler)
mkdir -p "$OUT/busy_site"
printf 'from cupti import cupti\n_s = cupti.subscribe(lambda *a: None, None)\n' > "$OUT/busy_site/sitecustomize.py"
PYTHONPATH="$OUT/busy_site:${PYTHONPATH:-}" rec busy -- python tests/programs/server_runner.py
rm -rf "$OUT/busy_site"
# A `cgtool capture` bundle: its exports carry the same per-node source block (tests/data/capture_sources)
$PY -m cgtool capture sample_workloads/transformer_block.py -o "$OUT/capture_transformer_block" --force \
  > "$OUT/capture_transformer_block.log" 2>&1
echo "== capture transformer_block: exit $?"; tail -n 5 "$OUT/capture_transformer_block.log"
