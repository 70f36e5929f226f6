"""What this machine supports for capture: torch, the CUDA driver, where tools ids come from,
CUPTI, Graphviz. Every probe is optional: on a machine without torch the answers say so."""

from __future__ import annotations

import os
import shutil


def machine_facts() -> dict[str, str]:
    """(what, value) pairs, in display order."""
    facts: dict[str, str] = {}
    cuda = False
    try:
        import torch

        facts["torch"] = f"{torch.__version__} (CUDA build {torch.version.cuda})"
        cuda = bool(torch.cuda.is_available())
        facts["CUDA device"] = torch.cuda.get_device_name() if cuda else "none"
    except ImportError:
        facts["torch"] = "not installed: analysis only (install cgtool[gpu] to capture)"
    try:
        from cuda.bindings import runtime as rt

        facts["cuda-bindings"] = "installed"
        if cuda:
            drv = rt.cudaDriverGetVersion()[1]
            facts["CUDA driver"] = f"{drv // 1000}.{drv % 1000 // 10}"
            from cgtool.capture.export import id_source_available

            facts["tools ids from"] = {"driver": "the driver (cudaGraphNodeGetToolsId, 13.1+)",
                                       "cupti": "CUPTI (driver older than 13.1)",
                                       "none": "nowhere: driver < 13.1 and no cupti-python"}[id_source_available()]
    except ImportError:
        facts["cuda-bindings"] = "not installed (needed for exports: cgtool[gpu])"
    from cgtool.capture._deps import optional_cupti

    facts["cupti-python"] = ("installed" if optional_cupti() is not None
                             else "not installed (cgtool trace falls back to --profiler torch)")
    facts["graphviz dot"] = shutil.which("dot") or "not found (cgtool dot writes .dot; install Graphviz to render)"
    facts["CUDA_DEVICE_MAX_CONNECTIONS"] = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "unset (driver default 8)")
    return facts
