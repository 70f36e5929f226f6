"""``cgtool record``: run a program unchanged and record every CUDA graph it instantiates, in every
process of it.

``launcher`` (the parent, no torch) starts the program with a bootstrap that makes every Python
process of it record itself (``process``: one ``recorder.Recorder`` per process, made of
``subscription``, ``tracker``, ``writer``, ``coverage``, ``ledger`` and ``exits``), then writes the
process tree (``tree``). ``api.record`` is the same recorder as a context manager; ``options`` the
one options type of every entry point; ``attribution`` and ``inductor`` turn the frames kept by the
callbacks into source lines and model lines. docs/record.md describes it all.
"""
