"""Renderers: typed analysis results into rich tables (``tables``), Graphviz DOT (``dot``), the
HTML report (``html`` with ``layout``, ``fold`` and ``plots``) and CI step summaries (``summary_md``).

JSON is each result's own ``to_json()``, written by ``cgtool.artifacts.jsonio``."""
