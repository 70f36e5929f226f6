"""Renderers: turn analysis results into rich tables, DOT, JSON and markdown."""
