#!/usr/bin/env bash
# The README's GPU commands as a user runs them (tests/gpu/test_docs_gpu.py), and the CPU-side doc
# tests (tests/test_docs.py) on the GPU machine, where the GPU commands run in full instead of
# stopping at "no CUDA":
#   bash scripts/gpu/docs.sh OUTDIR
# Writes OUTDIR/docs.log (steps headed "===== ", each step's exit status); no tarball.
# Estimated time on one H100: ~2.5 min (build ~15 s; capture of the fork/join ~15 s, export of the
# GPT-2 decode step ~25 s, trace ~15 s, bench of the chain, 3 fresh processes, ~40 s, record of the
# server runner ~15 s, export and trace to `-` ~30 s; tests/test_docs.py ~30 s). Every step runs
# under `timeout`; the script goes on after a failure.
# Success: "7 passed" for test_docs_gpu.py (capture, export, trace, bench, record; export and trace
# to `-`), and no failure in test_docs.py (the GPU command checks skip there: "a CUDA GPU is here").
set -u
OUT=${1:?usage: scripts/gpu/docs.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1 COLUMNS=110
exec > >(tee "$OUT/docs.log") 2>&1
step() { echo; echo "===== $*"; }

step "build the compiled parts"
timeout 120 python3 setup.py build_ext --inplace -q
echo "----- exit status: $?"

step "the README's GPU commands (tests/gpu/test_docs_gpu.py)"
timeout 420 python3 -m pytest -v -p no:cacheprovider -m gpu tests/gpu/test_docs_gpu.py
echo "----- exit status: $?"

step "the doc tests (tests/test_docs.py)"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_docs.py
echo "----- exit status: $?"
