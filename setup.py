"""Build step beside pyproject.toml: the optional C extensions.

* ``cgtool/capture/record/_nodecb.c``: CUPTI's node-creation callback of `cgtool record` and the
  graph export's reads in C (why: its header comment, with the measurements). Python >= 3.11.
* ``cgtool/artifacts/_columns.c``: the trace reader's columns of GPU events, scanned from the JSON
  text or made in one pass over msgspec's structs (why: its header comments). Any supported Python.

Both are optional: without a C compiler or Python headers the build goes on without them, and the
Python code they stand in for runs instead.
"""
import sys

from setuptools import Extension, setup

ext = [Extension("cgtool.artifacts._columns", ["cgtool/artifacts/_columns.c"], optional=True)]
if sys.version_info >= (3, 11):
    ext.append(Extension("cgtool.capture.record._nodecb", ["cgtool/capture/record/_nodecb.c"], optional=True))

setup(ext_modules=ext)
