"""Pure analysis of cgtool artifacts (``cgtool.artifacts``). Nothing here imports torch, touches a
GPU or imports ``cgtool.capture``."""
