"""cgtool: capture, replay, time and inspect CUDA graphs in PyTorch.

The package is layered (imports point one way, down):

* ``cgtool.cli``      thin typer commands
* ``cgtool.report``   renderers (rich tables, DOT, JSON, markdown)
* ``cgtool.inspect``  pure analysis of artifacts; never imports torch or ``capture``
* ``cgtool.capture``  the only code that touches torch.cuda, cuda.bindings and CUPTI
* ``cgtool.artifacts`` the typed formats both sides speak (graph, trace, bench) and JSON I/O

docs/architecture.md says where a new command or analysis goes.
"""

from cgtool._version import __version__ as __version__


def __getattr__(name: str) -> object:
    # ``cgtool.record(out)``: the library API of `cgtool record` (capture/record/api.py), imported on
    # first use so that ``import cgtool`` stays free of the capture side.
    if name == "record":
        from cgtool.capture.record.api import record

        return record
    raise AttributeError(f"module 'cgtool' has no attribute {name!r}")
