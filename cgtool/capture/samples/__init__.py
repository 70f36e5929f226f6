"""Samples that ship inside cgtool (the GPU demo runs them after a plain install)."""
