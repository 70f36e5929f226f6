"""Pure analysis of cgtool artifacts (``cgtool.artifacts``). Nothing here imports torch, touches a
GPU or imports ``cgtool.capture``."""

#: How close (µs) one GPU event's start must follow another's end to count as a serialization.
#: Here rather than in ``deps`` so that the CLI can show the default without loading the analysis.
DEFAULT_TOLERANCE_US = 0.5
