"""cgtool's version, in a module of its own: the modules that write it into artifacts and pages
import it from here, not through the package root (whose ``cgtool.record`` reaches the recorder)."""

__version__ = "0.1.0"
