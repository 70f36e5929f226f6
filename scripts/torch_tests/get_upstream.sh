#!/usr/bin/env bash
# Fill upstream/ with PyTorch's own CUDA-graph test files at the revisions run.py pins (UPSTREAM),
# where this machine can reach GitHub. PyTorch's code is not committed here: it stays in PyTorch's
# repository (BSD-3-Clause, https://github.com/pytorch/pytorch/blob/main/LICENSE -- keep its notice
# with any copy). A file already in upstream/ is kept (delete it to fetch again); a file pinned by its
# sha256 alone (no commit) cannot be fetched here: copy it in (README.md says from where).
# Afterwards each file's sha256 is printed and compared with the pin.
set -uo pipefail
cd "$(dirname "$0")"
mkdir -p upstream
get() {  # file commit
  if [ -e "upstream/$1" ]; then echo "upstream/$1: present, kept"; return; fi
  if [ "$2" = "-" ]; then echo "upstream/$1: MISSING, pinned by sha256 only: copy it in (see README.md)"; return; fi
  if curl -fsSL "https://raw.githubusercontent.com/pytorch/pytorch/$2/test/$1" -o "upstream/$1.part"; then
    mv "upstream/$1.part" "upstream/$1" && echo "upstream/$1 <- pytorch/pytorch@$2"
  else
    rm -f "upstream/$1.part"; echo "upstream/$1: could not fetch pytorch/pytorch@$2 (no network?)"
  fi
}
get test_cuda.py 000e43cdff99f30291164c1f2e90133f19fa83fb
get test_cuda_graph_utils.py 004ee054133a4dfedd65c57892b90fdf3c050403
get test_cuda_graph_debug.py -
python3 - <<'PY'
import hashlib, pathlib, runpy
pins = runpy.run_path("run.py")["UPSTREAM"]
for name, pin in pins.items():
    p = pathlib.Path("upstream") / name
    if not p.is_file():
        continue
    digest = hashlib.sha256(p.read_bytes()).hexdigest()
    verdict = "no sha256 pinned" if pin["sha256"] is None else ("matches the pin" if digest == pin["sha256"] else "DIFFERS from the pin")
    print(f"upstream/{name}: sha256 {digest} ({verdict})")
PY
