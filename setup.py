"""Build step beside pyproject.toml: the optional C extension of `cgtool record`.

``cgtool/capture/record/_nodecb.c`` is CUPTI's node-creation callback in C (why: its header
comment, with the measurements). It is optional: without a C compiler or Python headers, or on
Python 3.10, the build goes on without it and `cgtool record` uses its Python callback.
"""
import sys

from setuptools import Extension, setup

ext = []
if sys.version_info >= (3, 11):
    ext.append(Extension("cgtool.capture.record._nodecb", ["cgtool/capture/record/_nodecb.c"], optional=True))

setup(ext_modules=ext)
