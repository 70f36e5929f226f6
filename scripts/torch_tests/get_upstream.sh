#!/usr/bin/env bash
# Fetch PyTorch's own CUDA-graph test files, at the revisions run.py names, into upstream/ (not
# committed: PyTorch's code stays in PyTorch's repository). PyTorch is BSD-3-Clause licensed:
# https://github.com/pytorch/pytorch/blob/main/LICENSE -- keep its notice with any copy.
# run.py selects the tests it runs by id, so the full upstream files work as they are.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p upstream
get() {  # file commit
  curl -fsSL "https://raw.githubusercontent.com/pytorch/pytorch/$2/test/$1" -o "upstream/$1"
  echo "upstream/$1 <- pytorch/pytorch@$2"
}
get test_cuda.py 000e43cdff99f30291164c1f2e90133f19fa83fb
get test_cuda_graph_utils.py 004ee054133a4dfedd65c57892b90fdf3c050403
get test_cuda_graph_debug.py 1859fbc82f0f8322590940ba4e5b5d4f0564464f
