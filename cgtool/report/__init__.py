"""Renderers: typed analysis results into rich tables (``tables``) and Graphviz DOT (``dot``).

JSON is each result's own ``to_json()``, written by ``cgtool.artifacts.jsonio``."""
