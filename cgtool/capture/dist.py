"""Running under torchrun: which rank this is, and gathering small JSON results to rank 0.

Everything here is inert in a single process (WORLD_SIZE unset or 1). Results are exchanged as
JSON bytes in uint8 tensors over the workload's own process group (nothing is pickled).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

#: Environment that keeps NVLink multicast off in NCCL, PyTorch and NVSHMEM.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)


def distributed() -> bool:
    return world_size() > 1


def rank_path(path: Path) -> Path:
    """``trace.json.gz`` -> ``trace.rank1.json.gz`` under torchrun; unchanged otherwise."""
    if not distributed():
        return path
    name = path.name
    for suf in (".json.gz", ".json", ".dot", ".gz"):
        if name.endswith(suf):
            return path.with_name(f"{name[: -len(suf)]}.rank{rank()}{suf}")
    return path.with_name(f"{name}.rank{rank()}")


def rank_dir(path: Path) -> Path:
    """``out/`` -> ``out/rank1/`` under torchrun; unchanged otherwise."""
    return path / f"rank{rank()}" if distributed() else path


def gather(obj: Any) -> list[Any] | None:
    """Every rank's ``obj`` (JSON-able) on rank 0, in rank order; None on other ranks."""
    if not distributed():
        return [obj]
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        from cgtool.errors import UsageError

        raise UsageError("Running under torchrun (--nproc-per-node), but the workload did not initialise "
                         "torch.distributed, which the ranks need to report to rank 0: call "
                         "torch.distributed.init_process_group() in setup (see sample_workloads/tp_mlp.py), or "
                         "run without --nproc-per-node.")
    data = json.dumps(obj).encode()
    # gloo gathers host tensors (a program on gloo may have no GPU per rank); NCCL device tensors
    dev = torch.device("cpu") if dist.get_backend() == "gloo" else torch.device("cuda", torch.cuda.current_device())
    size = torch.tensor([len(data)], device=dev)
    sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, size)
    n = int(max(s.item() for s in sizes))
    buf = torch.zeros(n, dtype=torch.uint8, device=dev)
    buf[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(dev)
    bufs = [torch.zeros_like(buf) for _ in sizes]
    dist.all_gather(bufs, buf)
    if dist.get_rank() != 0:
        return None
    return [json.loads(bytes(b[: int(s.item())].cpu().numpy())) for b, s in zip(bufs, sizes)]


def maybe_relaunch(nproc: int | None, argv: list[str]) -> int | None:
    """Under ``--nproc-per-node N`` outside torchrun: run ``cgtool argv`` (without that option) under
    torchrun and return its exit code. None when this process should do the work itself."""
    if nproc is None or distributed():
        return None
    if nproc < 1:
        from cgtool.errors import UsageError

        raise UsageError("--nproc-per-node must be at least 1.")
    return relaunch_with_torchrun(nproc, strip_option(argv, "--nproc-per-node"))


def torchrun_command(nproc: int, argv: list[str]) -> list[str]:
    """The command that runs ``cgtool argv`` under torch.distributed.run with ``nproc`` processes
    (with the environment ``{**os.environ, **NO_MULTICAST}``)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "cgtool", *argv]


def relaunch_with_torchrun(nproc: int, argv: list[str]) -> int:
    """Run ``cgtool argv`` under torch.distributed.run with ``nproc`` processes; torchrun's exit code
    (1 when any rank failed: the CLI reads each rank's own code, ``cgtool.cli._children``)."""
    return subprocess.run(torchrun_command(nproc, argv), env={**os.environ, **NO_MULTICAST}).returncode


def strip_option(argv: list[str], name: str) -> list[str]:
    """argv without ``name VALUE`` / ``name=VALUE``."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == name:
            skip = True
            continue
        if a.startswith(name + "="):
            continue
        out.append(a)
    return out
