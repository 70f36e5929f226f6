"""Mutation testing of the analysis core: does a wrong number in the code fail a test?

Each mutant changes one operator or constant of one module (``<`` into ``<=``, ``+`` into ``-``,
``and`` into ``or``, ``max`` into ``min``, a number n into n + 1, a ``raise`` into ``pass``, ...),
and the tests of that module (``MODULES`` below: the test files that import it, directly or through
the entry point they test) run against it in a scratch copy of the package. A mutant is *killed*
when a test fails or the run takes more than ``TIMEOUT_FACTOR`` times the unmutated run. The
score is the share of killed mutants, after leaving out the mutants that compute the same results
as the code (listed by name with the reason in scripts/mutate_equivalent.txt).

    nice -n 10 python3 scripts/mutate.py                 # every module, the score per module
    nice -n 10 python3 scripts/mutate.py timing --list   # the mutants of one module, not run
    nice -n 10 python3 scripts/mutate.py reach --show-survivors

A mutant's name is ``module:function:before->after#k`` (the k-th such change in the function), so
it keeps its name when lines move. Written by hand (mutmut rewrites the package in place with
trampolines, and would run every test per mutant): this one mutates only the functions named in
``MODULES`` and runs only their tests, stopping at the first failure.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENT = ROOT / "scripts" / "mutate_equivalent.txt"
TIMEOUT_FACTOR = 4.0


@dataclass(frozen=True)
class Target:
    path: str  # the module's file, from the repository root
    tests: tuple[str, ...]  # test files (the fast, focused ones first: a kill stops the run)
    functions: tuple[str, ...] = ()  # only these functions and methods (default: all)


MODULES: dict[str, Target] = {
    "serializations": Target("cgtool/inspect/analyzers/serializations.py",
                             ("tests/test_figures.py", "tests/test_deps.py")),
    "timing": Target("cgtool/inspect/analyzers/timing.py", ("tests/test_figures.py", "tests/test_deps.py")),
    "reach": Target("cgtool/inspect/reach.py", ("tests/test_reach.py", "tests/test_figures.py")),
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
            ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in", ast.Add: "+", ast.Sub: "-", ast.Mult: "*",
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


def scratch_copy() -> Path:
    """A copy of the package (mutated in place) beside links to everything else of the checkout."""
    d = Path(tempfile.mkdtemp(prefix="cgtool-mutate-"))
    for p in ROOT.iterdir():
        if p.name in (".git", "build") or p.name.startswith(".wt"):
            continue
        if p.name in ("cgtool", "tests"):
            big = {"data"} if p.name == "tests" else set()  # tests/data: linked, not copied
            shutil.copytree(p, d / p.name, symlinks=True,
                            ignore=lambda folder, names: [n for n in names if n == "__pycache__" or n.endswith(".pyc")
                                                          or (Path(folder) == p and n in big)])
            if big:
                (d / "tests" / "data").symlink_to(p / "data")
        else:
            (d / p.name).symlink_to(p)
    return d


def run_tests(where: Path, tests: tuple[str, ...], timeout: float) -> tuple[bool, float]:
    """(the tests passed, seconds)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                            "-m", "not slow and not gpu and not subprocess", *tests], cwd=where, env=env, timeout=timeout,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return p.returncode == 0, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        return False, time.monotonic() - t0


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
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="*", metavar="MODULE", help=f"of {', '.join(MODULES)} (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    ap.add_argument("--show-survivors", action="store_true", help="print each survivor's name and line")
    ap.add_argument("--only", help="run only the mutants whose name contains this")
    args = ap.parse_args()
    names = args.modules or list(MODULES)
    if set(names) - set(MODULES):
        ap.error(f"unknown module(s) {sorted(set(names) - set(MODULES))}; known: {', '.join(MODULES)}")
    equiv = equivalent_names()
    where = scratch_copy()
    scores: list[tuple[str, int, int, int]] = []
    try:
        for name in names:
            t = MODULES[name]
            src = (ROOT / t.path).read_text()
            sites = _sites_fixed(name, src)
            if args.only:
                sites = [s for s in sites if args.only in s.name]
            if args.list:
                for s in sites:
                    print(f"{s.name}  (line {s.line}){'  [equivalent]' if s.name in equiv else ''}")
                continue
            ok, base = run_tests(where, t.tests, 1800)
            if not ok:
                print(f"{name}: the tests fail without a mutant ({' '.join(t.tests)})", file=sys.stderr)
                return 1
            timeout = max(30.0, TIMEOUT_FACTOR * base)
            target = where / t.path
            all_sites = _sites_fixed(name, src)
            killed = survived = skipped = 0
            survivors = []
            for s in sites:
                if s.name in equiv:
                    skipped += 1
                    continue
                k = all_sites.index(s)
                target.write_text(mutated_source(name, src, k))
                passed, _ = run_tests(where, t.tests, timeout)
                if passed:
                    survived += 1
                    survivors.append(s)
                else:
                    killed += 1
            target.write_text(src)
            total = killed + survived
            scores.append((name, killed, total, skipped))
            print(f"{name}: {killed}/{total} killed ({100 * killed / max(total, 1):.0f} %), "
                  f"{skipped} equivalent left out; tests: {' '.join(t.tests)} ({base:.1f} s unmutated)", flush=True)
            if args.show_survivors:
                for s in survivors:
                    print(f"  survived: {s.name}  (line {s.line})", flush=True)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    if scores:
        print("\nmodule            killed   score")
        for name, killed, total, _ in scores:
            print(f"{name:<17} {killed:>3}/{total:<4} {100 * killed / max(total, 1):5.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
