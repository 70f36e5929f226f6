"""``cgtool record``: run a program unchanged and record every CUDA graph it instantiates.

``launcher`` (the parent, no torch) starts ``python -m cgtool.capture.record._boot``, which
subscribes to CUPTI (``recorder``) and runs the program with runpy; ``attribution`` turns the
frames kept by the callbacks into source lines.
"""
