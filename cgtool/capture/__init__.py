"""The capture side: the only code that touches torch.cuda, cuda.bindings and CUPTI.

Import the submodules (``cgtool.capture.graph``, ...) explicitly: importing this package imports
neither torch nor the CUDA bindings, so the analysis side keeps working without them.
"""
