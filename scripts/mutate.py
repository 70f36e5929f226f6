"""Mutation testing of the analysis core: does a wrong number in the code fail a test?

Each mutant changes one operator or constant of one module (``<`` into ``<=``, ``+`` into ``-``,
``and`` into ``or``, ``max`` into ``min``, a number n into n + 1, a ``raise`` into ``pass``, ...),
and the tests of that module (``MODULES`` below: the test files that import it, directly or through
the entry point they test) run against it: in a fork of one process that imported the tests once,
with the mutated functions' code swapped in. A mutant is *killed* when a test fails or the run
takes more than ``TIMEOUT_FACTOR`` times the unmutated run. The
score is the share of killed mutants, after leaving out the mutants that compute the same results
as the code (listed by name with the reason in scripts/mutate_equivalent.txt).

    nice -n 10 python3 scripts/mutate.py                 # every module, the score per module
    nice -n 10 python3 scripts/mutate.py timing --list   # the mutants of one module, not run
    nice -n 10 python3 scripts/mutate.py reach --show-survivors

A mutant's name is ``module:function:before->after#k`` (the k-th such change in the function), so
it keeps its name when lines move. Written by hand (mutmut rewrites the package in place with
trampolines and starts the tests afresh): this one mutates only the functions named in ``MODULES``,
runs only their tests, stops at the first failure and imports nothing twice.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import io
import os
import signal
import sys
import time
import types
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENT = ROOT / "scripts" / "mutate_equivalent.txt"
TIMEOUT_FACTOR = 4.0


@dataclass(frozen=True)
class Target:
    path: str  # the module's file, from the repository root
    tests: tuple[str, ...]  # test files (the fast, focused ones first: a kill stops the run)
    functions: tuple[str, ...] = ()  # only these functions and methods (default: all)
    skip: tuple[str, ...] = ()  # test ids left out (too slow to run per mutant; named here)


MODULES: dict[str, Target] = {
    "serializations": Target("cgtool/inspect/analyzers/serializations.py",
                             ("tests/test_figures.py", "tests/test_match.py", "tests/test_deps.py"),
                             skip=("tests/test_match.py::test_inferred_match_agrees_with_brute_force[forkjoin_kineto]",)),
    "timing": Target("cgtool/inspect/analyzers/timing.py", ("tests/test_figures.py", "tests/test_deps.py")),
    "reach": Target("cgtool/inspect/reach.py", ("tests/test_reach_index.py", "tests/test_reach.py")),
    "graph_loading": Target("cgtool/artifacts/graph.py", ("tests/test_graph_loading.py", "tests/test_graph_model.py"),
                            ("load", "from_json", "_fast_parse", "_meta_ok", "_key", "_number",
                             "_meta_values_problem", "_int", "_int_list", "_parse")),
    "benchstats": Target("cgtool/inspect/benchstats.py", ("tests/test_bench_stats.py", "tests/test_bench_gate.py")),
}

_CMP_SWAP: dict[type, type] = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
                               ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
                               ast.In: ast.NotIn, ast.NotIn: ast.In}
_BIN_SWAP: dict[type, type] = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
                               ast.FloorDiv: ast.Div, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult,
                               ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd, ast.LShift: ast.RShift,
                               ast.RShift: ast.LShift}
_NAME_SWAP = {"max": "min", "min": "max", "maximum": "minimum", "minimum": "maximum", "nanmin": "nanmax",
              "nanmax": "nanmin", "any": "all", "all": "any", "floor": "ceil", "ceil": "floor"}
_OP_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is",
            ast.IsNot: "is_not", ast.In: "in", ast.NotIn: "not_in", ast.Add: "+", ast.Sub: "-", ast.Mult: "*",
            ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|",
            ast.LShift: "<<", ast.RShift: ">>", ast.And: "and", ast.Or: "or"}


def _skipped_ids(tree: ast.AST) -> set[int]:
    """Nodes never mutated: annotations (not evaluated), docstrings, f-strings and the arguments
    of a raised exception (its message)."""
    skip: set[int] = set()

    def mark(n: ast.AST | None) -> None:
        if n is not None:
            skip.update(id(x) for x in ast.walk(n))

    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mark(n.returns)
            for a in [*n.args.args, *n.args.kwonlyargs, *n.args.posonlyargs, n.args.vararg, n.args.kwarg]:
                if a is not None:
                    mark(a.annotation)
        elif isinstance(n, ast.AnnAssign):
            mark(n.annotation)
        elif isinstance(n, ast.JoinedStr):
            mark(n)
        elif isinstance(n, ast.Raise):
            mark(n.exc)
            mark(n.cause)
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body \
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant):
            mark(n.body[0])
    return skip


@dataclass(frozen=True)
class Mutant:
    name: str
    line: int


class _Mutator(ast.NodeTransformer):
    """Walks the module in a fixed order; lists its mutation sites, or applies site ``apply``."""

    def __init__(self, tree: ast.AST, module: str, functions: tuple[str, ...], apply: int = -1) -> None:
        self.skip = _skipped_ids(tree)
        self.module, self.functions, self.apply = module, functions, apply
        self.sites: list[Mutant] = []
        self.func: list[str] = []
        self.seen: Counter[str] = Counter()

    def _active(self) -> bool:
        return bool(self.func) and (not self.functions or self.func[-1] in self.functions)

    def _site(self, node: ast.AST, before: str, after: str) -> bool:
        """Record a site; True when it is the one to apply."""
        key = f"{self.module}:{self.func[-1]}:{before}->{after}"
        self.seen[key] += 1
        self.sites.append(Mutant(f"{key}#{self.seen[key]}", getattr(node, "lineno", 0)))
        return len(self.sites) - 1 == self.apply

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        self.func.append(node.name)
        self.generic_visit(node)
        self.func.pop()
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def generic_visit(self, node: ast.AST) -> ast.AST:
        if id(node) in self.skip or not self._active():
            return super().generic_visit(node)
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                new = _CMP_SWAP.get(type(op))
                if new and self._site(node, _OP_TEXT[type(op)], _OP_TEXT[new]):
                    node.ops[i] = new()
        elif isinstance(node, (ast.BinOp, ast.AugAssign)):
            new = _BIN_SWAP.get(type(node.op))
            if new and self._site(node, _OP_TEXT[type(node.op)], _OP_TEXT[new]):
                node.op = new()
        elif isinstance(node, ast.BoolOp):
            new = ast.Or if isinstance(node.op, ast.And) else ast.And
            if self._site(node, _OP_TEXT[type(node.op)], _OP_TEXT[new]):
                node.op = new()
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
            if self._site(node, "not" if isinstance(node.op, ast.Not) else "-x", "x"):
                return super().generic_visit(node.operand)
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float) and not isinstance(node.value, bool):
            if self._site(node, repr(node.value), repr(node.value + 1)):
                node.value = node.value + 1
        elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
            if self._site(node, repr(node.value), repr(not node.value)):
                node.value = not node.value
        elif isinstance(node, ast.Name) and node.id in _NAME_SWAP and isinstance(node.ctx, ast.Load):
            if self._site(node, node.id, _NAME_SWAP[node.id]):
                node.id = _NAME_SWAP[node.id]
        elif isinstance(node, ast.Attribute) and node.attr in _NAME_SWAP and isinstance(node.ctx, ast.Load):
            if self._site(node, node.attr, _NAME_SWAP[node.attr]):
                node.attr = _NAME_SWAP[node.attr]
        elif isinstance(node, ast.Raise):
            if self._site(node, "raise", "pass"):
                return ast.copy_location(ast.Pass(), node)
        elif isinstance(node, (ast.Break, ast.Continue)):
            a, b = ("break", "continue") if isinstance(node, ast.Break) else ("continue", "break")
            if self._site(node, a, b):
                return ast.copy_location(ast.Continue() if a == "break" else ast.Break(), node)
        return super().generic_visit(node)


def mutated_source(name: str, src: str, k: int) -> str:
    tree = ast.parse(src)
    tree = _Mutator(tree, name, MODULES[name].functions, apply=k).visit(tree)
    return ast.unparse(ast.fix_missing_locations(tree))


def _sites_fixed(name: str, src: str) -> list[Mutant]:
    tree = ast.parse(src)
    m = _Mutator(tree, name, MODULES[name].functions)
    m.visit(tree)
    return m.sites


def _functions(ns: dict[str, object], modname: str) -> dict[str, types.FunctionType]:
    """The module's functions and methods by qualified name (the functions nested in them are
    constants of their code)."""
    out: dict[str, types.FunctionType] = {}
    for v in list(ns.values()):
        if isinstance(v, types.FunctionType) and v.__module__ == modname:
            out[v.__qualname__] = v
        elif isinstance(v, type) and v.__module__ == modname:
            for a in vars(v).values():
                for f in (a, getattr(a, "__func__", None), getattr(a, "fget", None)):
                    if isinstance(f, types.FunctionType):
                        out[f.__qualname__] = f
    return out


def apply_mutant(name: str, src: str, k: int) -> None:
    """Swap the code of the functions mutant ``k`` changes into the imported module, so that every
    reference to them (``from module import f`` included) runs the mutant."""
    mod = importlib.import_module(MODULES[name].path[:-3].replace("/", "."))

    def compiled(text: str) -> dict[str, types.FunctionType]:
        ns: dict[str, object] = {"__name__": mod.__name__, "__file__": mod.__file__}
        exec(compile(text, str(mod.__file__), "exec"), ns)
        return _functions(ns, mod.__name__)

    plain, mutated = compiled(ast.unparse(ast.parse(src))), compiled(mutated_source(name, src, k))
    for q, f in _functions(vars(mod), mod.__name__).items():
        new, old = mutated.get(q), plain.get(q)
        if new is not None and old is not None and (new.__code__, new.__defaults__, new.__kwdefaults__) != (
                old.__code__, old.__defaults__, old.__kwdefaults__):
            f.__code__, f.__defaults__, f.__kwdefaults__ = new.__code__, new.__defaults__, new.__kwdefaults__


#: Every run: no parallel workers, no slow, GPU or process-starting tests (they test processes, not figures).
PYTEST_ARGS = ["-p", "no:cacheprovider", "-p", "no:randomly", "-n", "0", "-m", "not slow and not gpu and not subprocess"]


def _skips(name: str) -> list[str]:
    return [a for t in MODULES[name].skip for a in ("--deselect", t)]


def run_tests(name: str, src: str, k: int | None, timeout: float) -> tuple[bool, float]:
    """(the tests passed, seconds): in a fork of this process, which has imported the tests once,
    with mutant ``k`` swapped in (None: unmutated). Seconds above ``timeout``: stopped (SIGALRM)."""
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: mutate, run, exit with pytest's code (a timeout: SIGALRM, killed)
        code = 3
        try:
            signal.alarm(int(timeout) + 1)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            if k is not None:
                apply_mutant(name, src, k)
            code = int(pytest.main(["-x", "-q", *PYTEST_ARGS, *_skips(name), *MODULES[name].tests]))
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0, time.monotonic() - t0


def equivalent_names() -> dict[str, str]:
    out = {}
    if EQUIVALENT.exists():
        for ln in EQUIVALENT.read_text().splitlines():
            ln = ln.strip()
            if ln and not ln.startswith("#"):
                name, _, why = ln.partition(" ")
                out[name] = why.strip()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("modules", nargs="*", metavar="MODULE", help=f"of {', '.join(MODULES)} (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    ap.add_argument("--show-survivors", action="store_true", help="print each survivor's name and line")
    ap.add_argument("--only", help="run only the mutants whose name contains this")
    args = ap.parse_args()
    names = args.modules or list(MODULES)
    if set(names) - set(MODULES):
        ap.error(f"unknown module(s) {sorted(set(names) - set(MODULES))}; known: {', '.join(MODULES)}")
    equiv = equivalent_names()
    os.chdir(ROOT)
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    scores: list[tuple[str, int, int, int]] = []
    for name in names:
        t = MODULES[name]
        src = (ROOT / t.path).read_text()
        all_sites = _sites_fixed(name, src)
        sites = [s for s in all_sites if not args.only or args.only in s.name]
        if args.list:
            for s in sites:
                print(f"{s.name}  (line {s.line}){'  [equivalent]' if s.name in equiv else ''}")
            continue
        # import the tests (and all they import) once: every run forks from here
        with contextlib.redirect_stdout(io.StringIO()):
            pytest.main(["--collect-only", "-q", *PYTEST_ARGS, *_skips(name), *t.tests])
        ok, base = run_tests(name, src, None, 1800)
        if not ok:
            print(f"{name}: the tests fail without a mutant ({' '.join(t.tests)})", file=sys.stderr)
            return 1
        timeout = max(20.0, TIMEOUT_FACTOR * base)
        killed = survived = skipped = 0
        survivors, slow = [], []
        for s in sites:
            if s.name in equiv:
                skipped += 1
                continue
            passed, took = run_tests(name, src, all_sites.index(s), timeout)
            if passed:
                survived += 1
                survivors.append(s)
            else:
                killed += 1
                if took > timeout:
                    slow.append(s)
        total = killed + survived
        scores.append((name, killed, total, skipped))
        # a mutant that makes the tests loop is killed by the time limit; on a busy machine a slow
        # but passing run is too, so the count of those is printed: rerun them on an idle machine
        print(f"{name}: {killed}/{total} killed ({100 * killed / max(total, 1):.0f} %; {len(slow)} of them by the "
              f"time limit, {timeout:.0f} s), {skipped} equivalent left out; tests: {' '.join(t.tests)} "
              f"({base:.1f} s unmutated)", flush=True)
        if args.show_survivors:
            for s in survivors:
                print(f"  survived: {s.name}  (line {s.line})", flush=True)
            for s in slow:
                print(f"  by the time limit: {s.name}  (line {s.line})", flush=True)
    if scores:
        print("\nmodule            killed   score")
        for name, killed, total, _ in scores:
            print(f"{name:<17} {killed:>3}/{total:<4} {100 * killed / max(total, 1):5.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
