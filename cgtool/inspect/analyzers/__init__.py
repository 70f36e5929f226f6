"""One analyzer per question, behind the one entry point ``cgtool.inspect.deps.analyze`` (the way
HolisticTraceAnalysis puts ``analyzers/*.py`` behind ``TraceAnalysis``):

* ``matching``: which trace event ran which graph node (by node ids, or inferred);
* ``timing``: when each node became ready, the span and the measured critical path of each replay;
* ``serializations``: every serialization on a lane, judged true, fake or undecided;
* ``waits``: without channel data, waits behind unrelated work inferred from timing, and those it
  cannot tell from waits for room on a full GPU or for the launch to submit them;
* ``saving``: what the fake serializations cost, estimated by re-scheduling replays;
* ``advice``: notes and suggestions;
* ``compare``: two traces of one graph judged by measured span.

Each reads the matched events (``EventMatch``) and returns its part, frozen (``saving`` its
``Estimate``, ``advice`` its ``Advice``); ``deps.analyze`` builds the ``DepsResult`` from the parts
once, with their final values, and nothing changes it afterwards. None reads the trace file or the
graph again.
"""
