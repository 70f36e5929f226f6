#!/usr/bin/env bash
# The engine (cgtool.capture.graph.Graph, a drop-in torch.cuda.CUDAGraph) on the GPU machine:
# PyTorch's own CUDA-graph tests on torch alone and through the engine (scripts/torch_tests/run.py),
# then the engine's own GPU tests. From the repository root:
#
#   bash scripts/gpu/engine.sh OUTDIR
#
# Random call sequences on the engine and on torch alone, with deaths, hangs and leaks counted, are
# a separate call: bash scripts/gpu/engine_states.sh OUTDIR (docs/engine.md).
#
# Estimated run time on the H100 (torch 2.11): about 3 minutes -- extensions ~15 s, PyTorch's tests
# ~100 s (3 files x 2 modes), the engine's GPU tests ~60 s. Each PyTorch test file is cut off after
# 90 s per mode, the engine's GPU tests after 180 s.
#
# Needs PyTorch's test files in scripts/torch_tests/upstream/ (ignored by git: pass it in the run's
# carry list; see scripts/torch_tests/README.md). A missing file is reported and its tests do not run.
#
# Writes OUTDIR/engine.log and OUTDIR/engine.tgz (engine/torch_tests/summary.json: every PyTorch test
# in both runs; engine/RESULTS.md: scripts/torch_tests/RESULTS.md with its results section filled
# from that run; engine/engine_gpu.json and .xml: the engine's GPU tests one by one; the logs).
set -u
OUT=${1:?usage: bash scripts/gpu/engine.sh OUTDIR}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
STAGE=$(mktemp -d)
DATA=$STAGE/engine
mkdir -p "$DATA"
exec 3>&1 >"$OUT/engine.log" 2>&1  # fd 3: the console, for the summary at the end
export PYTHONUNBUFFERED=1
step() { echo; echo "===== $*"; }
T0=$SECONDS
declare -A RC

step "environment"
python3 -c 'import sys, torch; print("python", sys.version.split()[0], "| torch", torch.__version__, "| cuda", torch.version.cuda, "|", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"
python3 -c 'import expecttest, cuda.bindings; print("expecttest", getattr(expecttest, "__version__", "?"), "| cuda.bindings", cuda.bindings.__version__)' || echo "WARNING: expecttest or cuda.bindings missing"
git log -1 --format='cgtool %H %s' 2>/dev/null || true
ls -l scripts/torch_tests/upstream/ 2>/dev/null || echo "scripts/torch_tests/upstream/: missing (PyTorch's tests cannot run)"
(cd scripts/torch_tests/upstream 2>/dev/null && sha256sum ./*.py) || true

step "build the optional C extensions"
timeout 60 python3 setup.py build_ext --inplace -q >"$DATA/build.log" 2>&1
RC[build]=$?; tail -3 "$DATA/build.log"; echo "rc=${RC[build]}"

step "PyTorch's CUDA-graph tests: torch alone, then through the engine"
python3 scripts/torch_tests/run.py --out "$DATA/torch_tests" --timeout 90
RC[torch_tests]=$?; echo "rc=${RC[torch_tests]} (0: every test about the engine passes with it; 1: some fail; 2: no test files)"

step "RESULTS.md with the results section of this run"
if [ -f "$DATA/torch_tests/summary.json" ]; then
  cp scripts/torch_tests/RESULTS.md "$DATA/RESULTS.md"
  python3 scripts/torch_tests/run.py --render "$DATA/torch_tests/summary.json" --results "$DATA/RESULTS.md"
  RC[render]=$?
else
  echo "no summary.json: run.py did not get that far"; RC[render]=1
fi
echo "rc=${RC[render]}"

step "the engine's own GPU tests"
timeout 180 python3 -m pytest -q -m gpu tests/gpu/test_engine_gpu.py tests/gpu/test_engine_torch_compat_gpu.py \
  -p no:cacheprovider -rfEs --junitxml="$DATA/engine_gpu.xml" 2>&1 | tail -40
RC[engine_gpu]=${PIPESTATUS[0]}; echo "rc=${RC[engine_gpu]}"
python3 - "$DATA/engine_gpu.xml" "$DATA/engine_gpu.json" <<'PY'
import json, sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError) as e:
    print(f"no junit XML to convert: {e}"); sys.exit(0)
rows = []
for c in root.iter("testcase"):
    kids = [k for k in c if k.tag in ("failure", "error", "skipped")]
    outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}.get(kids[0].tag, "passed") if kids else "passed"
    msg = (kids[0].get("message") or "").strip().splitlines()[:1] if kids else []
    rows.append({"test": f"{c.get('classname')}::{c.get('name')}", "outcome": outcome,
                 "message": msg[0][:300] if msg else "", "seconds": float(c.get("time") or 0)})
json.dump(rows, open(sys.argv[2], "w"), indent=1)
counts = {o: sum(r["outcome"] == o for r in rows) for o in ("passed", "failed", "error", "skipped")}
print("engine GPU tests:", counts)
PY

step "tarball"
tar -czf "$OUT/engine.tgz" -C "$STAGE" engine
RC[tar]=$?; ls -l "$OUT/engine.tgz"; echo "rc=${RC[tar]}"
rm -rf "$STAGE"

step "summary ($((SECONDS - T0)) s)"
for k in build torch_tests render engine_gpu tar; do echo "$k: rc=${RC[$k]:-unset}"; done
tail -n 40 "$OUT/engine.log" >&3
