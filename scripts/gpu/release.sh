#!/usr/bin/env bash
# What a release needs on the GPU machine, from the repository root:   bash scripts/gpu/release.sh OUTDIR
#   1. every GPU test (`python3 -m pytest -m gpu tests`: engine, PyTorch's seed API through the engine,
#      record, bench, the README's GPU commands), from the source tree;
#   2. the main job as a new user runs it: the wheel built with `pip wheel`, installed plainly (not
#      editable, `--no-index --no-deps --no-build-isolation`: the machine has no network) into the
#      machine's Python, and `cgtool demo` run from /tmp, away from the checkout, so the installed
#      package and the sample it ships do the job (the GPU path: capture, trace, bench).
# Wheels for packages the machine lacks (cupti-python, msgspec, pytest and its needs) are expected in
# .whl/. Writes OUTDIR/release.log (steps headed "===== ", each with its exit status) and
# OUTDIR/demo.txt; exits 1 listing the steps that failed.
# Estimated time on one H100: ~7 minutes (GPU tests ~5, wheel ~20 s, demo ~1.5).
set -u
OUT=${1:?usage: bash scripts/gpu/release.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$PWD
exec > >(tee "$OUT/release.log") 2>&1
export PYTHONUNBUFFERED=1 COLUMNS=110
FAILED=()
step() {  # step NAME LIMIT_S COMMAND...: run it under timeout, print and keep its exit status
  local name=$1 limit=$2; shift 2
  echo; echo "===== $name"
  timeout "$limit" "$@"; local rc=$?
  echo "----- $name: exit $rc"
  [ "$rc" -eq 0 ] || FAILED+=("$name (exit $rc)")
}

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
step "environment" 60 bash -c 'nvidia-smi -L; python3 -c "import sys, torch; print(sys.version); print(torch.__version__, torch.cuda.get_device_name(0))"'
step "build the compiled parts" 120 python3 setup.py build_ext --inplace -q
step "every GPU test" 420 env PYTHONPATH="/tmp/site:$ROOT" python3 -m pytest -q -p no:cacheprovider -m gpu tests \
    -o junit_family=xunit2 --junitxml "$OUT/gpu_tests.xml"
rm -rf /tmp/dist
step "build the wheel" 120 python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/dist .
step "install the wheel (not editable)" 120 python3 -m pip install -q --no-index --no-deps --no-build-isolation \
    --force-reinstall /tmp/dist/cgtool-*.whl
cd /tmp
step "the installed package is not the checkout" 30 python3 -c "
import cgtool, sys; print(cgtool.__file__); sys.exit(cgtool.__file__.startswith('$ROOT'))"
step "cgtool demo (installed wheel, GPU path)" 240 bash -o pipefail -c "cgtool demo 2>&1 | tee '$OUT/demo.txt'"
step "the demo ran on the GPU" 10 bash -c "! grep -q 'No CUDA GPU' '$OUT/demo.txt' && grep -q 'GPU µs per replay' '$OUT/demo.txt'"
cd "$ROOT"

echo
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "===== ${#FAILED[@]} step(s) failed:"; printf '  %s\n' "${FAILED[@]}"; exit 1
fi
echo "===== every step passed"
