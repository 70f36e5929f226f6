#!/usr/bin/env bash
# The engine's whole GPU check, in one call (docs/engine.md):
#   (a) PyTorch's failed-capture and nested-use_mem_pool tests in one process (engine_pair.py), and
#   (c) random call sequences on the engine and on torch alone (engine_states.py) -- both through
#       scripts/gpu/engine_states.sh; beside them, in parallel:
#   (b) PyTorch's CUDA-graph tests, each file whole in one process, torch alone then the engine
#       (scripts/torch_tests/run.py, default isolation; OUTDIR's tarball has RESULTS.md rendered), and
#   (d) the engine's GPU tests (tests/gpu/test_engine_gpu.py, test_engine_torch_compat_gpu.py,
#       test_engine_states_gpu.py).
# From the repository root:
#
#   bash scripts/gpu/engine_final.sh OUTDIR [SEQUENCES] [WORKERS] [SHRINK_SECONDS] [RUN_SECONDS]
#
# Defaults: 2000 sequences per backend, cgtool=6,torch=8 workers, 15 s of shrinking, 140 s of
# sequences. On one H100 (torch 2.11) the lanes take ~190 s (sequences), ~180 s (PyTorch's tests,
# both modes) and ~60 s (GPU tests), all at once: ~4 minutes in all. Each lane is cut off after
# ENGINE_FINAL_CAP=290 s, so a call of 330 s or more always gets its summary. Needs PyTorch's
# test files in scripts/torch_tests/upstream/ (ignored by git: name it in the run's carry list);
# a missing file is reported and its tests do not run. Writes OUTDIR/final.tgz (every log and JSON)
# and prints a summary: deaths, hangs, broken processes and leaks per backend, the pair's results,
# PyTorch's tests per mode and the engine's GPU tests.
set -u
OUT=${1:?usage: bash scripts/gpu/engine_final.sh OUTDIR [SEQUENCES] [WORKERS] [SHRINK_SECONDS] [RUN_SECONDS]}
N=${2:-2000}
W=${3:-cgtool=6,torch=8}
SHRINK_S=${4:-15}
RUN_S=${5:-140}
CAP=${ENGINE_FINAL_CAP:-290}  # seconds each of the three parallel lanes may take
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
STAGE=$(mktemp -d)/final
mkdir -p "$STAGE"
export PYTHONUNBUFFERED=1
T0=$SECONDS
{
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "| torch", torch.__version__, "| cuda", torch.version.cuda, "|", torch.cuda.get_device_name(0))'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
  git log -1 --format='cgtool %H %s' 2>/dev/null
  (cd scripts/torch_tests/upstream 2>/dev/null && sha256sum ./*.py) || echo "scripts/torch_tests/upstream/: missing"
} >"$STAGE/environment.txt" 2>&1
timeout 90 python3 setup.py -q build_ext --inplace >"$STAGE/build.log" 2>&1

# Three lanes at once: the random sequences, PyTorch's tests (both modes, ~180 s on an H100), the
# engine's GPU tests (~60 s).
timeout "$CAP" bash scripts/gpu/engine_states.sh "$STAGE/states" "$N" "$W" "$SHRINK_S" "$RUN_S" >"$STAGE/states.console" 2>&1 &
STATES_PID=$!
{
  timeout $((CAP - 5)) python3 scripts/torch_tests/run.py --out "$STAGE/torch_tests" --timeout 110
  echo "run.py: exit status $?"
  if [ -f "$STAGE/torch_tests/summary.json" ]; then
    cp scripts/torch_tests/RESULTS.md "$STAGE/RESULTS.md"
    python3 scripts/torch_tests/run.py --render "$STAGE/torch_tests/summary.json" --results "$STAGE/RESULTS.md" >/dev/null
  fi
} >"$STAGE/torch_tests.console" 2>&1 &
TESTS_PID=$!
timeout $((CAP - 5)) python3 -m pytest -q -m gpu -p no:cacheprovider -o addopts="--strict-markers -ra" -rfEs \
  tests/gpu/test_engine_gpu.py tests/gpu/test_engine_torch_compat_gpu.py tests/gpu/test_engine_states_gpu.py \
  --junitxml="$STAGE/engine_gpu.xml" >"$STAGE/pytest.console" 2>&1
echo "pytest: exit status $?" >>"$STAGE/pytest.console"
wait "$TESTS_PID"
wait "$STATES_PID"
STATES_RC=$?
tar -czf "$OUT/final.tgz" -C "$(dirname "$STAGE")" final

echo "===== engine_final.sh: $((SECONDS - T0)) s"
cat "$STAGE/environment.txt"
echo "----- (a) PyTorch's failed-capture + nested-use_mem_pool pair, one process per backend"
grep -E '^(pair |\{)' "$STAGE/states/engine_states.log" | head -12
echo "----- (c) random sequences (engine_states.py exit status $STATES_RC)"
grep -v "^\[ *[0-9]* s\]" "$STAGE/states.console" | sed -n '/===== random sequences/,$p' | tail -40
echo "----- (b) PyTorch's tests, whole file per process (torch alone, then through the engine)"
grep -E "^\[(torch|engine)\]|sha256|run.py: exit" "$STAGE/torch_tests.console" | tail -12
sed -n '/^| mode | category/,/^$/p' "$STAGE/torch_tests.console"
grep -E "^- \[engine\]|^Tests about the engine failing" "$STAGE/torch_tests.console" | head -12
echo "----- (d) the engine's GPU tests"
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)|pytest: exit" "$STAGE/pytest.console" | tail -12
exit 0
