"""Build step beside pyproject.toml: the optional C extensions.

* ``cgtool/capture/_graphread.c``: the graph export's reads in C (one call for a graph's nodes, edges,
  kernel parameters, function names and CUPTI node ids; adjacency lists; node dicts), used by
  ``capture/graphread.py`` and ``capture/export.py``. Any supported Python.
* ``cgtool/capture/record/_nodecb.c``: CUPTI's callback of `cgtool record` (node creations, instantiations,
  replay counts, memory taken during captures), why in its header comment. Python >= 3.11.
* ``cgtool/artifacts/_columns.c``: the trace reader's columns of GPU events, scanned from the JSON
  text or made in one pass over msgspec's structs (why: its header comments). Any supported Python.
* ``cgtool/inspect/analyzers/_cover.c``: `cgtool deps`' sums of cover times overlap over each wait,
  in a loop's own order and rounding (why: its header comment). Any supported Python.

All are optional: without a C compiler or Python headers the build goes on without them, and the
Python code they stand in for runs instead.
"""
import sys

from setuptools import Extension, setup

ext = [Extension("cgtool.artifacts._columns", ["cgtool/artifacts/_columns.c"], optional=True),
       Extension("cgtool.capture._graphread", ["cgtool/capture/_graphread.c"], optional=True),
       # No fused multiply-add: the sums must round as the Python loop they stand in for.
       Extension("cgtool.inspect.analyzers._cover", ["cgtool/inspect/analyzers/_cover.c"], optional=True,
                 extra_compile_args=["-ffp-contract=off"])]
if sys.version_info >= (3, 11):
    ext.append(Extension("cgtool.capture.record._nodecb", ["cgtool/capture/record/_nodecb.c"], optional=True))

setup(ext_modules=ext)
