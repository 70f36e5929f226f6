"""Loading a workload: ``path/to/script.py``, ``script.py:fn`` or ``package.module:fn``.

The convention (docs/workloads.md): the named function (``setup`` when none is named) is
called once with no arguments and returns the *step*: a zero-argument callable whose CUDA work
cgtool warms up, captures and replays, and whose return value (a tensor, or a tuple/list/dict of
tensors) is compared between replay and eager. It may instead return a :class:`Precaptured`
for workloads that capture themselves (``make_graphed_callables``). Script arguments come
after ``--`` and are in ``sys.argv[1:]`` while the script loads and ``setup`` runs.

Scripts are loaded under the module name ``__cgtool_workload__``, so their
``if __name__ == "__main__":`` block never runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

from cgtool.errors import CaptureError, MissingExtraError, UsageError

DEFAULT_FUNCTION = "setup"
MODULE_NAME = "__cgtool_workload__"


@dataclass
class Precaptured:
    """What ``setup`` returns for a workload that captured its own graphs.

    ``graphs``: ``(label, cgtool.capture.graph.Graph)`` pairs with live templates.
    ``step``: runs the graphed work once (it replays the graphs) and returns outputs.
    ``eager``: the same work without graphs, for the replay-vs-eager check (None skips it).
    """

    graphs: list[tuple[str, Any]]
    step: Callable[[], Any]
    eager: Callable[[], Any] | None = None


@dataclass(frozen=True)
class Target:
    """A parsed TARGET: a file or a module, and the function to call."""

    spec: str
    path: Path | None
    module: str | None
    function: str
    explicit_function: bool = field(default=False)

    @property
    def name(self) -> str:
        """A short name for bundles and tables: the script's stem (plus the function if named)."""
        base = self.path.stem if self.path else (self.module or "workload").rsplit(".", 1)[-1]
        return f"{base}-{self.function}" if self.explicit_function else base


def parse_target(spec: str) -> Target:
    """Parse without importing anything. Missing files are reported here (exit code 2)."""
    if not spec:
        raise UsageError("No TARGET given: pass `script.py`, `script.py:fn` or `package.module:fn`.")
    head, sep, fn = spec.rpartition(":")
    if not sep or os.sep in fn or fn.endswith(".py"):
        head, fn = spec, ""
    if head.endswith(".py") or os.sep in head or Path(head).is_file():
        p = Path(head)
        if not p.is_file():
            raise UsageError(
                f"No such script: {p} (looked in {Path.cwd()}). TARGET is `path/to/script.py`, "
                "`script.py:fn` or `package.module:fn`."
            )
        return Target(spec, p.resolve(), None, fn or DEFAULT_FUNCTION, bool(fn))
    if not fn:
        raise UsageError(
            f"TARGET {spec!r} is neither a .py file nor `package.module:function`. "
            f"Name the function, e.g. `{spec}:{DEFAULT_FUNCTION}`."
        )
    return Target(spec, None, head, fn, True)


@contextmanager
def _script_argv(target: Target, args: list[str]) -> Iterator[None]:
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [str(target.path or target.module)] + list(args)
    if target.path is not None:
        sys.path.insert(0, str(target.path.parent))
    else:
        sys.path.insert(0, os.getcwd())
    try:
        yield
    finally:
        sys.argv, sys.path[:] = old_argv, old_path


def _user_frame(tb: Any, target: Target) -> str:
    """'file:line' of the innermost frame in the user's code (not cgtool, not site-packages)."""
    frames = traceback.extract_tb(tb)
    here = str(Path(__file__).resolve().parent.parent)
    user = [f for f in frames if not f.filename.startswith(here) and "site-packages" not in f.filename
            and not f.filename.startswith("<frozen")]
    if target.path is not None:
        mine = [f for f in frames if Path(f.filename).resolve() == target.path]
        user = mine or user
    if not user:
        return ""
    f = user[-1]
    line = f" ({f.line.strip()})" if f.line else ""
    return f"{f.filename}:{f.lineno}{line}"


def load_module(target: Target, args: list[str] | None = None) -> ModuleType:
    with _script_argv(target, args or []):
        try:
            if target.path is not None:
                from cgtool.capture.record.attribution import mark_user_file

                mark_user_file(target.path)  # its lines are the user's, also where it ships inside cgtool
                spec = importlib.util.spec_from_file_location(MODULE_NAME, target.path)
                assert spec is not None and spec.loader is not None
                mod = importlib.util.module_from_spec(spec)
                sys.modules[MODULE_NAME] = mod
                spec.loader.exec_module(mod)
                return mod
            return importlib.import_module(target.module or "")
        except SyntaxError as e:
            raise CaptureError(
                f"Syntax error in {e.filename}:{e.lineno}: {e.msg}. Fix the script and run again."
            ) from None
        except ModuleNotFoundError as e:
            if target.module and e.name and target.module.startswith(e.name):
                raise UsageError(
                    f"Cannot import module {target.module!r} (no module named {e.name!r}). "
                    "Check the name and that its package is importable from here (PYTHONPATH)."
                ) from None
            where = _user_frame(e.__traceback__, target)
            if (e.name or "").split(".")[0] in ("torch", "cuda", "cupti"):
                raise MissingExtraError(f"{target.spec} (it imports {e.name!r} at {where or 'import'})",
                                        detail=str(e.name)) from None
            raise CaptureError(
                f"Importing {target.spec} failed at {where or 'import'}: {e}. Install the missing "
                "package or fix the import."
            ) from None
        except SystemExit as e:
            raise CaptureError(
                f"{target.spec} called sys.exit({e.code}) while loading. Move the script's "
                "top-level work into a function (cgtool calls `setup()`)."
            ) from None
        except Exception as e:
            where = _user_frame(e.__traceback__, target)
            raise CaptureError(
                f"Loading {target.spec} raised {type(e).__name__}: {e} (at {where or 'load time'}). "
                "Fix the script; cgtool imports it without running its __main__ block."
            ) from None


def resolve(target: Target, args: list[str] | None = None) -> Callable[[], Any]:
    """The setup function named by ``target``."""
    mod = load_module(target, args)
    fn = getattr(mod, target.function, None)
    if fn is None or not callable(fn):
        funcs = sorted(
            n for n, v in vars(mod).items()
            if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == mod.__name__
        )
        where = target.path or target.module
        raise UsageError(
            f"{where} has no function {target.function!r}. "
            + (f"Functions defined there: {', '.join(funcs)}. " if funcs else "")
            + f"Name one with `{target.spec.split(':')[0]}:FUNCTION`, or define `{DEFAULT_FUNCTION}()` "
            "returning the step to capture."
        )
    return fn  # type: ignore[no-any-return]


def call_setup(target: Target, fn: Callable[[], Any], args: list[str] | None = None) -> Any:
    """Call the setup function; its errors point at the user's file and line."""
    with _script_argv(target, args or []):
        try:
            step = fn()
        except Exception as e:
            where = _user_frame(e.__traceback__, target)
            raise CaptureError(
                f"{target.spec}: {target.function}() raised {type(e).__name__}: {e} "
                f"(at {where or 'setup'}). Fix the workload's setup and run again."
            ) from None
    if not (callable(step) or isinstance(step, Precaptured)):
        raise UsageError(
            f"{target.spec}: {target.function}() returned {type(step).__name__}, but cgtool needs "
            "the step to capture: a zero-argument callable (or a cgtool Precaptured). "
            "Return the function, e.g. `return step`, not `return step()`."
        )
    return step
