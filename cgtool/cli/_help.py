"""cgtool's ``--help``, done once for every command: plain text like a tool's help at any width,
the same whatever typer (0.12 to 0.29) would render.

* values are named by words, never by Python types: an argument by its name (``GRAPH``,
  ``TRACE``, ``INPUT...``), an option by what it takes (``N``, ``X``, ``FILE``, ``DIR``, ``GRAPH``);
* nothing is cut at any width: click's formatter wraps (it never truncates), a command's summary in
  the list is its whole first paragraph, and text is re-wrapped whole (a docstring's line breaks
  do not break a sentence in the middle of the screen);
* ``-h`` is ``--help`` everywhere, and ``-q/--quiet`` is accepted after the command too.

``polish`` walks the click command tree typer builds and gives each parameter its word (so that
errors say ``Missing argument 'GRAPH'``) and each command this help; the command modules declare
their options as usual.
"""

from __future__ import annotations

import copy
import re
import textwrap
import types
from enum import Enum
from pathlib import PurePath
from typing import Any, Callable, Iterable, get_args

#: Option values named by the option (the others by their type: N, X, FILE, a word for text).
_BY_OPTION = {"--graph": "GRAPH", "--trace": "TRACE", "--workload": "TARGET", "--max-regression": "PCT",
              "--tolerance-us": "US", "--args": "ARGS", "--label": "LABEL", "--title": "TITLE",
              "--profiler": "cupti|torch", "--render": "svg|png", "--fail-on": "CONDITION",
              "--driver-flags": "FLAGS", "--max-bytes": "SIZE", "--nnodes": "N", "--rdzv-endpoint": "HOST:PORT"}
#: ... and where one command's option takes something else than the same option elsewhere.
_BY_COMMAND_OPTION = {("capture", "--output"): "DIR", ("record", "--out"): "DIR", ("deps", "--compare"): "TRACE",
                      ("bench", "--compare"): "OLD NEW"}
#: Arguments named other than their parameter (a list's name is plural: one item is singular).
_BY_ARGUMENT = {"targets": "TARGET", "inputs": "INPUT", "a": "GRAPH_A", "b": "GRAPH_B"}
_ESCAPED = re.compile(r"\\(\[)")  # rich markup escapes in help texts (``\[tool.cgtool]``): shown plainly


def _kind(p: Any) -> tuple[str, list[str]]:
    """What a parameter takes: int, float, path, text, choice (with the choices), tuple or bool.
    typer 0.29 describes a parameter's type with ``type_descriptor``; older typer and click with a
    click ``ParamType`` in ``type``."""
    d = getattr(p, "type_descriptor", None)
    if d is not None:
        if getattr(d, "is_choice", False):
            return "choice", [str(c.value if isinstance(c, Enum) else c) for c in (d.choices or ())]
        if getattr(d, "is_tuple", False):
            return "tuple", []
        ann = d.annotation
        if getattr(d, "is_list", False) and get_args(ann):
            ann = get_args(ann)[0]
        ann = next((a for a in get_args(ann) if a is not type(None)), ann) if get_args(ann) else ann
        if getattr(d, "is_path", False) or (isinstance(ann, type) and issubclass(ann, PurePath)):
            return "path", []
        return {int: "int", float: "float", bool: "bool"}.get(ann, "text"), []
    t = getattr(p, "type", None)
    cls = " ".join(c.__name__ for c in type(t).__mro__)  # IntRange, FloatParamType, Path, Choice, Tuple, ...
    if "Choice" in cls:
        return "choice", [str(c.value if isinstance(c, Enum) else c) for c in getattr(t, "choices", ())]
    for key, kind in (("Int", "int"), ("Float", "float"), ("Path", "path"), ("File", "path"), ("Bool", "bool"),
                      ("Tuple", "tuple")):
        if key in cls:
            return kind, []
    return "text", []


def _takes_value(p: Any) -> bool:
    return getattr(p, "param_type_name", "") == "argument" or not (getattr(p, "is_flag", False)
                                                                   or getattr(p, "count", False))


def _long(p: Any) -> str:
    opts: list[str] = list(getattr(p, "opts", None) or [""])
    return next((o for o in opts if o.startswith("--")), opts[0])


def metavar(command: str, p: Any) -> str:
    """The word that names what ``p`` takes (an explicit metavar stays as declared)."""
    if getattr(p, "param_type_name", "") == "argument":
        word = p.metavar or _BY_ARGUMENT.get(p.name, p.name.upper())
        return str(word).rstrip(".")
    if p.metavar:
        return str(p.metavar)
    opts = list(getattr(p, "opts", []))
    for o in opts:
        if (command, o) in _BY_COMMAND_OPTION:
            return _BY_COMMAND_OPTION[(command, o)]
    for o in opts:
        if o in _BY_OPTION:
            return _BY_OPTION[o]
    long = _long(p)
    kind, choices = _kind(p)
    if kind == "choice":
        return "|".join(choices)
    return {"int": "N", "float": "X", "path": "FILE", "tuple": "VALUES"}.get(kind, long.lstrip("-").upper() or "VALUE")


def polish(cmd: Any, quiet: Callable[[Any, Any, Any], Any] | None = None, name: str = "cgtool",
           quiet_param: Any = None) -> None:
    """Give every parameter of ``cmd`` (a click command, and its subcommands) its word and every
    command this help; ``quiet_param`` (the root's ``-q/--quiet``) is added to each subcommand, with
    ``quiet`` as its callback."""
    if quiet_param is None:
        quiet_param = next((p for p in cmd.params if "--quiet" in getattr(p, "opts", [])), None)
    for p in cmd.params:
        if _takes_value(p):
            p.metavar = metavar(name, p)
    cmd.format_help = types.MethodType(format_help, cmd)
    cmd.format_usage = types.MethodType(format_usage, cmd)
    subs = getattr(cmd, "commands", None) or {}
    for sub_name, sub in subs.items():
        if quiet_param is not None and quiet is not None and not any(
                "--quiet" in getattr(p, "opts", []) for p in sub.params):
            q = copy.copy(quiet_param)
            q.expose_value = False
            q.callback = quiet
            q.is_eager = True
            sub.params.append(q)
        polish(sub, quiet, sub_name, quiet_param)


def _usage_pieces(cmd: Any) -> list[str]:
    pieces = ["[OPTIONS]"] if any(getattr(p, "param_type_name", "") == "option" and not getattr(p, "hidden", False)
                                  for p in cmd.params) else []
    for p in cmd.params:
        if getattr(p, "param_type_name", "") != "argument":
            continue
        word = p.metavar or p.name.upper()
        word += "..." if p.nargs != 1 else ""
        pieces.append(word if p.required else f"[{word}]")
    if getattr(cmd, "commands", None):
        pieces.append("COMMAND [ARGS]...")
    elif (getattr(cmd, "context_settings", None) or {}).get("allow_extra_args"):
        # what goes after `--`: the program to run (record), or the script's own arguments
        has_args = any(getattr(p, "param_type_name", "") == "argument" for p in cmd.params)
        pieces.append("[-- SCRIPT_ARG...]" if has_args else "-- PROGRAM [ARG...]")
    return pieces


def format_usage(self: Any, ctx: Any, formatter: Any) -> None:
    formatter.write_usage(ctx.command_path, " ".join(_usage_pieces(self)))


def _text(s: str | None) -> str:
    return _ESCAPED.sub(r"\1", s or "")


def _paragraphs(s: str) -> list[str]:
    """A help text's paragraphs, each on one line (re-wrapped by the formatter)."""
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", _text(s).strip()) if p.strip()]


def summary(cmd: Any) -> str:
    """A command's line in the list: its whole first paragraph (click would cut it to fit one line)."""
    short = getattr(cmd, "short_help", None)
    paras = _paragraphs(short or getattr(cmd, "help", None) or "")
    return paras[0] if paras else ""


def _default(p: Any) -> str | None:
    show = getattr(p, "show_default", None)
    if isinstance(show, str):
        return show
    if show is False or getattr(p, "param_type_name", "") != "option":
        return None
    value = p.default
    if callable(value) or value is None or value == () or value == [] or type(value).__name__ == "Sentinel":
        return None
    if getattr(p, "is_flag", False):
        if not getattr(p, "secondary_opts", None):
            return None
        return (_long(p) if value else next(iter(p.secondary_opts)))
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, PurePath):
        value = str(value)
    if isinstance(value, (list, tuple)):
        value = " ".join(map(str, value))
    return str(value) if str(value) != "" else None


def _option_record(p: Any) -> tuple[str, str]:
    names = sorted(p.opts, key=lambda o: (o.startswith("--"), o))  # -g, --graph
    first = ", ".join(names)
    if _takes_value(p):
        first += f" {p.metavar}"
    if getattr(p, "secondary_opts", None):
        first += " / " + ", ".join(p.secondary_opts)
    extra = []
    d = _default(p)
    if d is not None:
        extra.append(f"default: {d}")
    if getattr(p, "multiple", False):
        extra.append("repeatable")
    help_ = " ".join(_text(getattr(p, "help", "")).split())
    return first, help_ + (f"  [{'; '.join(extra)}]" if extra else "")


def _argument_record(p: Any) -> tuple[str, str]:
    word = p.metavar + ("..." if p.nargs != 1 else "")
    help_ = " ".join(_text(getattr(p, "help", None)).split())
    return word, help_ + ("" if p.required else "  [optional]")


def _sections(cmd: Any, ctx: Any) -> Iterable[tuple[str, list[tuple[str, str]]]]:
    params = [p for p in cmd.get_params(ctx) if not getattr(p, "hidden", False)]
    args = [_argument_record(p) for p in params if getattr(p, "param_type_name", "") == "argument"]
    opts = [_option_record(p) for p in params if getattr(p, "param_type_name", "") == "option"]
    if args:
        yield "Arguments", args
    if opts:
        yield "Options", opts
    subs = getattr(cmd, "commands", None) or {}
    panels: dict[str, list[tuple[str, str]]] = {}
    for sub_name in cmd.list_commands(ctx) if subs else []:
        sub = subs[sub_name]
        if getattr(sub, "hidden", False):
            continue
        panels.setdefault(getattr(sub, "rich_help_panel", None) or "Commands", []).append((sub_name, summary(sub)))
    yield from panels.items()


#: The first column of a section is at most this wide; a longer entry puts its text on the next line.
_COL_MAX = 30


def _wrap(text: str, width: int, indent: int) -> list[str]:
    """``text`` wrapped to ``width``, between words only: a word with a hyphen or a path
    (``per-replay``, ``./cgtool-out/``) is never split, a word longer than the line stands alone."""
    return textwrap.wrap(text, width=max(width, indent + 20), initial_indent=" " * indent,
                         subsequent_indent=" " * indent, break_on_hyphens=False, break_long_words=False) or [""]


def _hanging(text: str, width: int) -> list[str]:
    """``text`` under its entry, indented less; a word longer than a whole line is broken (never
    cut: every character is shown)."""
    lines = _wrap(text, width, 6)
    if max(map(len, lines)) <= width:
        return lines
    return textwrap.wrap(text, width=width, initial_indent=" " * 6, subsequent_indent=" " * 6,
                         break_on_hyphens=False) or [""]


def format_help(self: Any, ctx: Any, formatter: Any) -> None:
    """The whole help of a command: usage, its text (re-wrapped), arguments, options, commands."""
    format_usage(self, ctx, formatter)
    width = formatter.width
    lines: list[str] = []
    for para in _paragraphs(getattr(self, "help", None) or ""):
        lines += ["", *_wrap(para, width, 2)]
    for title, rows in _sections(self, ctx):
        lines += ["", f"{title}:"]
        col = min(max(len(first) for first, _ in rows), _COL_MAX)
        for first, text in rows:
            if text and max(map(len, _wrap(text, width, col + 4))) > width:
                # a word too long for the text column (a comma list): the text under the entry
                lines.append("  " + first)
                lines += _hanging(text, width)
            elif len(first) > col:
                lines.append("  " + first)
                if text:
                    lines += _wrap(text, width, col + 4)
            else:
                body = _wrap(text, width, col + 4) if text else [""]
                body[0] = ("  " + first.ljust(col) + "  " + body[0].lstrip()).rstrip()
                lines += body
    epilog = getattr(self, "epilog", None)
    if epilog:
        lines += ["", *_wrap(" ".join(_text(epilog).split()), width, 2)]
    formatter.write("\n".join(lines) + "\n")


__all__ = ["metavar", "polish", "summary"]
