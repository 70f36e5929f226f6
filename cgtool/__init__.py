"""cgtool: capture, replay, time and inspect CUDA graphs in PyTorch.

The package is layered (imports point one way, down):

* ``cgtool.cli``      thin typer commands
* ``cgtool.report``   renderers (rich tables, DOT, JSON, markdown)
* ``cgtool.inspect``  pure analysis of artifacts; never imports torch
* ``cgtool.capture``  the only code that touches torch.cuda, cuda.bindings and CUPTI
"""

__version__ = "0.1.0"
