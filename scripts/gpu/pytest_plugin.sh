#!/usr/bin/env bash
# GPU steps of the pytest plugin, from the repository root on the GPU machine (one H100):
#   bash scripts/gpu/pytest_plugin.sh OUTDIR      (at most ~290 s)
# 1. cgtool installed by pip into /tmp/cgsite (its pytest11 entry point; without a usable
#    setuptools there, a copy of the package beside a dist-info holding pyproject.toml's entry point);
# 2. benchmarks/bench_pytest_plugin.py: the entry point session, the fixture against `cgtool bench`
#    (fresh processes, then one process), the gate's A/A pairs; limit 225 s, --budget 205;
# 3. tests/gpu/test_pytest_plugin_gpu.py (two fresh pytest processes), in what is left of 285 s.
# Writes OUTDIR/pip.log, gpu_tests.txt, bench_pytest_plugin_h100.txt and .json; prints the figures.
set -u
OUT=${1:?usage: bash scripts/gpu/pytest_plugin.sh OUTDIR}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 COLUMNS=160
SITE=/tmp/cgsite
rm -rf "$SITE"
T0=$SECONDS
if timeout 45 python3 -m pip install --no-deps --no-build-isolation --no-index --target "$SITE" . > "$OUT/pip.log" 2>&1; then
  echo "installed by pip into $SITE"
else
  tail -3 "$OUT/pip.log"
  echo "pip could not build here: a copy of cgtool/ and a dist-info with pyproject.toml's pytest11 entry point"
  python3 - "$SITE" <<'PY'
import shutil, sys, tomllib
from pathlib import Path
site = Path(sys.argv[1]); site.mkdir(parents=True, exist_ok=True)
shutil.copytree("cgtool", site / "cgtool")
eps = tomllib.loads(Path("pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
d = site / "cgtool-0.1.0.dist-info"; d.mkdir()
(d / "METADATA").write_text("Metadata-Version: 2.1\nName: cgtool\nVersion: 0.1.0\n")
(d / "entry_points.txt").write_text("[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()))
PY
fi
timeout 225 python3 benchmarks/bench_pytest_plugin.py --rounds 2 --pairs 50 --budget 205 --site "$SITE" \
  --json "$OUT/bench_pytest_plugin_h100.json" > "$OUT/bench_pytest_plugin_h100.txt" 2>&1
echo "benchmark: exit $? after $((SECONDS - T0)) s"
grep -E "^entry point|^fresh|^same process|^A/A:|^budget|exit [1-9]|Error" "$OUT/bench_pytest_plugin_h100.txt" | tail -30
LEFT=$((285 - (SECONDS - T0)))
timeout $LEFT python3 -m pytest -q -rA -s -m gpu -p no:cacheprovider tests/gpu/test_pytest_plugin_gpu.py > "$OUT/gpu_tests.txt" 2>&1
echo "gpu tests: exit $? (limit $LEFT s)"
grep -E "small step:|passed|failed|Error" "$OUT/gpu_tests.txt" | tail -8
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
