"""A multi-stream fork/join: 8 independent branches of 1024x1024 fp32 GEMMs joined by a sum.

The sample ships inside cgtool (``cgtool/capture/samples/forkjoin.py``) so that ``cgtool demo``
runs it after a plain install; this file is the same workload under the samples' usual path.
"""

from cgtool.capture.samples.forkjoin import setup

__all__ = ["setup"]
