"""What this machine supports for capture (``cgtool doctor``): torch and its build, the CUDA device
and driver, where tools ids come from, cuda-bindings, cupti-python, cgtool's compiled parts,
Graphviz. Every probe is optional: on a machine without torch the answers say so.

Each answer is a ``Fact``: a value (a boolean, a version, a name, a number) or None with the reason
it is unknown, and a note with what to do about it where that helps. ``--json`` writes the values
(``facts_json``); the table shows them with their notes (``facts_display``).
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from dataclasses import dataclass
from typing import Any, Union

#: A fact's value: what JSON can hold, None for unknown.
Value = Union[bool, int, str, None]
DOCTOR_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Fact:
    """One answer. ``key`` is its place in the JSON (``torch.version``); ``note`` is, for a value of
    None, why it is unknown, and otherwise what to do about it (empty when nothing)."""

    key: str
    label: str
    value: Value
    note: str = ""
    #: In the table: shown as this instead of the value and note ("" : not shown; None: as usual).
    shown: str | None = None


def _version(dist: str) -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(dist)
        except PackageNotFoundError:
            return None
    except ImportError:  # pragma: no cover
        return None


def _compiled(module: str) -> tuple[bool, str]:
    """Whether a compiled part of cgtool is built and loads here, and why not."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as e:
        return False, f"not built ({e}); the Python code it stands in for runs instead (slower)"
    return True, ""


def _torch() -> Any:
    """torch, or None where it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def machine_facts() -> list[Fact]:
    """Every answer, in display order."""
    from cgtool._version import __version__

    facts = [Fact("cgtool", "cgtool", __version__),
             Fact("python", "Python", platform.python_version(), sys.executable)]
    cuda = False
    torch = _torch()
    if torch is None:
        why = "torch is not installed"
        facts += [Fact("torch.installed", "torch", False, "analysis only: install cgtool[gpu] to capture",
                       "not installed (analysis only: install cgtool[gpu] to capture)"),
                  Fact("torch.version", "torch version", None, why, ""),
                  Fact("torch.cuda_build", "torch CUDA build", None, why, ""),
                  Fact("torch.cpu_only", "torch CPU-only", None, why, ""),
                  Fact("cuda.available", "CUDA device", None, why, ""),
                  Fact("cuda.device", "CUDA device name", None, why, "")]
    else:
        version = str(torch.__version__)
        build = getattr(getattr(torch, "version", None), "cuda", None)
        facts += [Fact("torch.installed", "torch", True, "",
                       f"{version}, CUDA {build} build" if build else
                       f"{version}, CPU-only build (it cannot capture CUDA graphs: install a CUDA build of torch, "
                       "see pytorch.org)"),
                  Fact("torch.version", "torch version", version, "", ""),
                  Fact("torch.cuda_build", "torch CUDA build", str(build) if build else None,
                       "" if build else "a CPU-only build of torch", ""),
                  Fact("torch.cpu_only", "torch CPU-only", not build, "", "")]
        try:
            cuda = bool(torch.cuda.is_available())
        except Exception as e:  # a broken driver install raises here
            facts.append(Fact("cuda.available", "CUDA device", None, f"torch.cuda.is_available() failed: {e}"))
        else:
            facts.append(Fact("cuda.available", "CUDA device", cuda, "", None if cuda else
                              "none (torch sees no CUDA device: no GPU, no driver, or a CPU-only build)"))
        name = torch.cuda.get_device_name() if cuda else None
        facts.append(Fact("cuda.device", "CUDA device name", name, "" if cuda else "no CUDA device",
                          name if name else ""))
        if cuda:
            facts[-2] = Fact("cuda.available", "CUDA device", True, "", "")
    bindings = _version("cuda-bindings") or _version("cuda-python")
    try:
        from cuda.bindings import runtime as rt
    except ImportError:
        rt = None
    facts += _package("cuda_bindings", "cuda-bindings", rt is not None, bindings,
                      "graph exports need it: install cgtool[gpu]")
    driver: str | None = None
    ids: str | None = None
    why_driver = why_ids = "cuda-bindings is not installed" if rt is None else "no CUDA device"
    if rt is not None and cuda:
        try:
            drv = rt.cudaDriverGetVersion()[1]
            driver = f"{drv // 1000}.{drv % 1000 // 10}"
            from cgtool.capture.export import id_source_available

            ids = id_source_available()
        except Exception as e:
            why_driver = why_ids = f"the driver could not be asked ({type(e).__name__}: {e})"
    facts.append(Fact("cuda.driver", "CUDA driver", driver, "" if driver else why_driver))
    id_notes = {"driver": "the driver (cudaGraphNodeGetToolsId, 13.1+)", "cupti": "CUPTI (driver older than 13.1)",
                "none": "nowhere: the driver is older than 13.1 and cupti-python is not installed"}
    facts.append(Fact("tools_ids.source", "tools ids from", ids, id_notes[ids] if ids else why_ids))
    from cgtool.capture._deps import optional_cupti

    have_cupti = optional_cupti() is not None
    if have_cupti:
        cupti_note = ""
    elif torch is not None:
        cupti_note = ("cgtool trace falls back to --profiler torch (no channels); cgtool record needs it "
                      "(cgtool[gpu])")
    else:
        cupti_note = "cgtool trace and cgtool record need it, with torch (cgtool[gpu])"
    facts += _package("cupti_python", "cupti-python", have_cupti, _version("cupti-python"), cupti_note)
    ok, why = _compiled("cgtool.artifacts._columns")
    facts.append(Fact("compiled.trace_columns", "compiled trace reader (_columns)", ok, why))
    if sys.version_info >= (3, 11):
        ok, why = _compiled("cgtool.capture.record._nodecb")
        facts.append(Fact("compiled.record_callback", "compiled record callback (_nodecb)", ok, why))
    else:
        facts.append(Fact("compiled.record_callback", "compiled record callback (_nodecb)", None,
                          "built only for Python 3.11+; the Python callback runs instead"))
    dot = shutil.which("dot")
    facts.append(Fact("graphviz.dot", "Graphviz dot", dot, "" if dot else "not on PATH",
                      None if dot else "not found (cgtool dot writes .dot files; install Graphviz to render them)"))
    mc = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")
    mc_value: Value = int(mc) if mc is not None and mc.strip().isdigit() else mc
    facts.append(Fact("env.CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_DEVICE_MAX_CONNECTIONS", mc_value,
                      "unset" if mc is None else "", "unset (the driver's default, 8)" if mc is None else None))
    return facts


def _package(key: str, label: str, installed: bool, version: str | None, missing: str) -> list[Fact]:
    """Whether a package is installed and its version, shown in the table as one row."""
    if not installed:
        return [Fact(f"{key}.installed", label, False, missing, f"not installed ({missing})"),
                Fact(f"{key}.version", label, None, f"{label} is not installed", "")]
    return [Fact(f"{key}.installed", label, True, "", f"yes, {version}" if version else "yes"),
            Fact(f"{key}.version", label, version, "" if version else "its distribution's metadata is missing", "")]


def facts_json(facts: list[Fact]) -> dict[str, Any]:
    """The values, nested by key (``{"torch": {"version": ...}}``), and ``unknown``: for each value
    that is None, why."""
    doc: dict[str, Any] = {"kind": "doctor", "schema_version": DOCTOR_SCHEMA_VERSION}
    unknown: dict[str, str] = {}
    for f in facts:
        *path, last = f.key.split(".")
        d = doc
        for k in path:
            d = d.setdefault(k, {})
        d[last] = f.value
        if f.value is None:
            unknown[f.key] = f.note
    doc["unknown"] = unknown
    return doc


def facts_display(facts: list[Fact]) -> dict[str, str]:
    """Label -> what the table shows: the value in words, and its note."""
    out: dict[str, str] = {}
    said: set[str] = set()
    for f in facts:
        if f.shown is not None:
            if f.shown:
                out[f.label] = f.shown
            continue
        if f.value is None and f.note in said:  # "torch is not installed" once, not for every fact it hides
            continue
        said.add(f.note)
        if f.value is None:
            shown = f"unknown: {f.note}" if f.note else "unknown"
        else:
            v = {True: "yes", False: "no"}.get(f.value, f.value) if isinstance(f.value, bool) else str(f.value)
            shown = f"{v} ({f.note})" if f.note else str(v)
        out[f.label] = shown
    return out
