"""Loaded at start-up by every Python process whose path has this folder (scripts/torch_tests/run.py
puts it there): installs cgtool_torch_shim when CGTOOL_TORCH_SHIM is "torch" or "engine"."""

import os

if os.environ.get("CGTOOL_TORCH_SHIM"):
    import cgtool_torch_shim

    cgtool_torch_shim.install(os.environ["CGTOOL_TORCH_SHIM"])
