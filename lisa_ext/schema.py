"""YAML input files: one bounded loader and a small declarative checker.

Campaign specs, kernel variant specs, workload options, target configs,
platform descriptions, RFC-number files and the store's copy of a spec are all
read with :func:`load_yaml` and checked with :func:`check_mapping`. A leaf of
the package: it imports nothing of lisa_ext but :mod:`lisa_ext.errors`, so
every layer may use it.

These files travel between colleagues, so reading one is bounded before any
value is used: at most :data:`MAX_YAML_BYTES` of UTF-8 text, mappings and lists
nested at most :data:`MAX_YAML_DEPTH` deep, at most :data:`MAX_YAML_VALUES`
values once every alias is expanded (a "billion laughs" file is refused while
it is read, not expanded), no recursive alias and no decimal number longer
than :data:`MAX_NUMBER_DIGITS` digits. Explicit tags other than YAML's core types
are refused (``!!python/...``, and LISA's ``!call:``, ``!include``, ``!env:``, ``!var``,
which LISA's own loader of a target config would run or follow). Every number a :class:`Field` accepts has a range (:attr:`Field.bounds`).

Each input is checked before anything runs; the first problem becomes a
:class:`~lisa_ext.errors.SpecError` naming the file, the dotted key (with the
YAML line when known) or the line or byte offset, and what is allowed there.
"""

from __future__ import annotations

import argparse

import datetime as _dt
import math
import os
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, ScalarEvent
from ruamel.yaml.parser import RoundTripParser
from ruamel.yaml.scalarbool import ScalarBoolean
from ruamel.yaml.scanner import RoundTripScanner

from lisa_ext.errors import SpecError

__all__ = ["DURATION_S", "MAX_JOBS", "MAX_NUMBER_DIGITS", "MAX_YAML_BYTES", "MAX_YAML_DEPTH", "MAX_YAML_VALUES",
           "THREADS", "TIMEOUT_S", "Field", "Number", "argument_problem", "check_mapping", "in_bounds", "jobs_argument",
           "load_yaml", "read_text", "show", "text_problem", "type_names"]

#: a YAML number: ints are accepted wherever floats are
Number = (int, float)

#: the largest spec or config file read; the largest shipped one is 5 KB
MAX_YAML_BYTES = 128 << 10
#: mappings and lists nested deeper than this are refused; a spec needs about 6
MAX_YAML_DEPTH = 50
#: values (scalars, mappings, lists) a file may hold once every alias is expanded;
#: a study's spec holds a few hundred
MAX_YAML_VALUES = 10_000
#: decimal digits of a number: no key takes more, and Python refuses to convert 4300
MAX_NUMBER_DIGITS = 100

#: seconds a workload runs: up to a day
DURATION_S = (1, 86_400)
#: seconds before a workload or a wait is given up: up to a week
TIMEOUT_S = (1, 604_800)
#: threads, jobs, clients or CPUs of one workload
THREADS = (1, 4096)

_DECIMAL = re.compile(r"[-+]?[0-9][0-9_]*")
#: the explicit tags a spec may carry: YAML's own core types (``!!str``, ``!!int``, ...)
_PLAIN_TAG = re.compile(r"tag:yaml\.org,2002:(str|int|float|bool|null|map|seq)")


@dataclass(frozen=True)
class Field:
    """One allowed key: its accepted types, whether it must be present, a help text."""

    types: tuple[type, ...]
    help: str
    required: bool = False
    check: Callable[[Any], str | None] | None = field(default=None)
    """Extra validation returning a problem description, or None when fine."""
    bounds: tuple[float, float] | None = None
    """For a number: the smallest and largest value allowed (both included)."""

    def range_text(self) -> str:
        """How the docs and messages state :attr:`bounds`: ``1 to 10000``."""
        low, high = self.bounds
        return f"{show(low)} to {show(high)}"


def in_bounds(value: Any, low: float, high: float) -> bool:
    """Whether ``value`` is a finite number (not a boolean) from ``low`` to ``high``."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and low <= value <= high)


def show(value: Any, limit: int = 40) -> str:
    """``value`` for a one-line message: shortened, a whole float without its ``.0``."""
    if isinstance(value, ScalarBoolean):  # an anchored true/false: a boolean, not the int it subclasses
        value = bool(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    text = str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def argument_problem(value: Any, what: str) -> str | None:
    """What is wrong with ``value`` as one word of a command line (a git ref or URL, an SSH
    host or user name, a device serial), or None: it must be a non-empty string that no
    program can read as an option (a leading ``-``) and without whitespace or control
    characters, which would split it or hide part of it."""
    if not isinstance(value, str) or not value:
        return f"expected {what} (a non-empty string), got {show(value)}"
    if value.startswith("-"):
        return f"{show(value)} starts with '-', which a program would read as an option; not {what}"
    bad = next((c for c in value if c.isspace() or unicodedata.category(c)[0] == "C"), None)
    if bad is not None:
        return f"{show(value)} holds whitespace or a control character ({bad!r}); not {what}"
    return None


#: the most parallel jobs a command line may ask for (make -j, report --jobs): each is a process
MAX_JOBS = 1024


def jobs_argument(text: str) -> int:
    """argparse type of a ``-j``/``--jobs`` option: a whole number from 1 to :data:`MAX_JOBS`
    (0 or -3 would otherwise reach make as ``-j0``/``-j-3`` and fail only after the tree was prepared)."""
    value = int(text) if text.strip().isdigit() else None
    if value is None or not 1 <= value <= MAX_JOBS:
        raise argparse.ArgumentTypeError(f"{show(text)}: expected a number of jobs from 1 to {MAX_JOBS}")
    return value


def text_problem(value: Any) -> str | None:
    """What is wrong with ``value`` as free text a terminal or a page will show (a description),
    or None: control characters (an escape sequence could rewrite what a user reads) other
    than tab and newline are refused."""
    if not isinstance(value, str):
        return f"expected text, got {show(value)}"
    bad = next((c for c in value if c not in "\t\n" and unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        return f"holds the control character {bad!r}; free text may hold tabs and newlines only"
    return None


#: what a message calls a value of each type; ruamel's round-trip types (``ScalarFloat``,
#: ``CommentedSeq``, ``CommentedMap``, ...) are named by the plain type they stand for
_TYPE_NAMES: dict[type, str] = {bool: "boolean", ScalarBoolean: "boolean", int: "integer", float: "number",
                                str: "string", list: "list", dict: "mapping", _dt.date: "date",
                                type(None): "null"}


def _type_name(t: type) -> str:
    return next((_TYPE_NAMES[base] for base in t.__mro__ if base in _TYPE_NAMES), t.__name__)


def type_names(types: tuple[type, ...]) -> str:
    """``integer or string``: how a message names the types of a value, never a Python class."""
    return " or ".join(dict.fromkeys(_type_name(t) for t in types))


def _is_instance(value: Any, types: tuple[type, ...]) -> bool:
    # YAML booleans are ints in Python: never accept true/false for a number
    if isinstance(value, (bool, ScalarBoolean)) and bool not in types:
        return False
    return isinstance(value, types)


def _where(node: Any, key: str) -> str:
    lc = getattr(node, "lc", None)
    if lc is not None:
        try:
            line, _col = lc.key(key)
            return f" (line {line + 1})"
        except (KeyError, TypeError, AttributeError):
            pass
    return ""


def _value_problem(spec: Field, value: Any) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return f"expected a finite number ({spec.help}), got {show(value)}"
    if spec.bounds is not None and isinstance(value, (int, float)) and not isinstance(value, bool) \
            and not in_bounds(value, *spec.bounds):
        kind = "a number" if float in spec.types else "an integer"
        return f"expected {kind} from {spec.range_text()} ({spec.help}), got {show(value)}"
    return spec.check(value) if spec.check is not None else None


def check_mapping(path: str | os.PathLike, node: Any, prefix: str,
                  schema: Mapping[str, Field]) -> dict[str, Any]:
    """Check ``node`` against ``schema``; return it as a plain dict.

    ``prefix`` is the dotted position of ``node`` in the file, used in messages.
    """
    where = prefix or "top level"
    if not isinstance(node, Mapping):
        raise SpecError(path, where, f"expected a mapping, got {type_names((type(node),))}")
    allowed = ", ".join(schema)
    for key in node:
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key not in schema:
            raise SpecError(path, dotted + _where(node, key), f"unknown key; allowed here: {allowed}")
        spec = schema[key]
        value = node[key]
        if not _is_instance(value, spec.types):
            raise SpecError(path, dotted + _where(node, key),
                            f"expected {type_names(spec.types)} ({spec.help}), "
                            f"got {type_names((type(value),))} {show(value)}")
        problem = _value_problem(spec, value)
        if problem:
            raise SpecError(path, dotted + _where(node, key), problem)
    for key, spec in schema.items():
        if spec.required and key not in node:
            dotted = f"{prefix}.{key}" if prefix else key
            raise SpecError(path, dotted, f"missing required key ({spec.help})")
    return dict(node)


def read_text(path: str | os.PathLike, what: str, limit: int = MAX_YAML_BYTES) -> str:
    """The UTF-8 text of a spec or config file of at most ``limit`` bytes; SpecError otherwise."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise SpecError(path, what, f"cannot read: {exc.strerror}") from None
    if len(data) > limit:
        raise SpecError(path, what, f"larger than {limit} bytes; {what} files are a few KB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecError(path, f"byte {exc.start} (line {line})",
                        f"not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as UTF-8") from None


class _Refused(YAMLError):
    """A document past one of the bounds, found while it is read."""

    def __init__(self, mark: Any, problem: str):
        self.mark, self.problem = mark, problem


class _BoundedScanner(RoundTripScanner):
    """ruamel's round-trip scanner, refusing nesting past :data:`MAX_YAML_DEPTH` as soon as
    it meets it: ruamel's own look-ahead is quadratic in the depth of ``[[[[...``, and
    its composer recursive."""

    def _check_depth(self) -> None:
        if self.flow_level + len(self.indents) > MAX_YAML_DEPTH:
            raise _Refused(self.reader.get_mark(), f"mappings and lists nested more than {MAX_YAML_DEPTH} "
                           "deep; {what} files need a handful of levels")

    def fetch_flow_collection_start(self, TokenClass: Any, to_push: str) -> None:
        super().fetch_flow_collection_start(TokenClass, to_push)
        self._check_depth()

    def add_indent(self, column: int) -> bool:
        added = super().add_indent(column)
        self._check_depth()
        return added


class _BoundedParser(RoundTripParser):
    """ruamel's round-trip parser, counting the values of the document as the composer takes
    its events, every alias expanded (an anchor's size is known once its node ends), so
    that a "billion laughs" file is refused before anything is built from it."""

    def __init__(self, loader: Any):
        super().__init__(loader)
        self._open: list[list] = []  # per open collection: [values so far, anchor]
        self._sizes: dict[str, int] = {}
        self._total = 0

    def get_event(self) -> Any:
        event = super().get_event()
        self._count(event)
        return event

    def _count(self, event: Any) -> None:
        tag = getattr(event, "tag", None)
        if tag is not None and not _PLAIN_TAG.fullmatch(tag):
            raise _Refused(event.start_mark, f"tag {tag} is not allowed: {{what}} files are plain YAML "
                           "(LISA's loader would run !call:, read files with !include)")
        if isinstance(event, CollectionStartEvent):
            self._open.append([1, event.anchor])
            return
        if isinstance(event, AliasEvent):
            size = self._sizes.get(event.anchor)
            if size is None:
                inside = any(anchor == event.anchor for _, anchor in self._open)
                raise _Refused(event.start_mark, f"alias *{event.anchor} refers to " + (
                    "the node holding it (a recursive structure)" if inside else "no anchor defined before it"))
        elif isinstance(event, CollectionEndEvent):
            size, anchor = self._open.pop()
            if anchor is not None:
                self._sizes[anchor] = size
        elif isinstance(event, ScalarEvent):
            size = 1
            if event.style is None and len(event.value) > MAX_NUMBER_DIGITS and _DECIMAL.fullmatch(event.value):
                raise _Refused(event.start_mark, f"a number of {len(event.value)} digits; no key takes "
                               f"more than {MAX_NUMBER_DIGITS}")
            if event.anchor is not None:
                self._sizes[event.anchor] = 1
        else:
            return
        self._total += size
        if self._open:
            self._open[-1][0] += size
        if self._total > MAX_YAML_VALUES:
            via = f" (alias *{event.anchor} expands to {size})" if isinstance(event, AliasEvent) else ""
            raise _Refused(event.start_mark, f"more than {MAX_YAML_VALUES} values once aliases are "
                           f"expanded{via}; {{what}} files hold a few hundred")


def _line(mark: Any) -> str:
    return f"line {mark.line + 1}" if mark is not None else "(yaml)"


def _plain_keys(path: str | os.PathLike, doc: Any) -> Any:
    """``doc``, once every mapping key is text, a number, a boolean or null: a list, mapping or
    date as a key (``? [a, b]``, ``2024-01-01:``) names nothing a file of ours has, and no
    caller could copy it into plain data."""
    stack = [doc]
    while stack:  # the values are bounded, aliases expanded (MAX_YAML_VALUES)
        node = stack.pop()
        if isinstance(node, Mapping):
            for key, value in node.items():
                if not isinstance(key, (str, int, float, type(None))):
                    raise SpecError(path, show(key) + _where(node, key),
                                    "a list, mapping or date as a key; a key is text or a number (quote it)")
                stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return doc


def load_yaml(path: str | os.PathLike, what: str) -> Any:
    """Parse a YAML file keeping line numbers, within the bounds of the module docstring;
    a missing, oversized, non-UTF-8, unparsable, too deep or too large file is a SpecError."""
    if os.path.isdir(path):
        raise SpecError(path, what, f"a directory; expected a {what} file (YAML)")
    if not os.path.isfile(path):
        raise SpecError(path, what, "file not found")
    text = read_text(path, what)
    yaml = YAML(typ="rt")
    yaml.Scanner, yaml.Parser = _BoundedScanner, _BoundedParser
    try:
        return _plain_keys(path, yaml.load(text))
    except _Refused as exc:
        raise SpecError(path, _line(exc.mark), exc.problem.replace("{what}", what)) from None
    except MarkedYAMLError as exc:
        problem = " ".join(filter(None, (exc.context, exc.problem)))
        raise SpecError(path, _line(exc.problem_mark or exc.context_mark),
                        f"not valid YAML: {problem}".replace("\n", " ")) from None
    except YAMLError as exc:
        raise SpecError(path, what, f"not valid YAML: {exc}".replace("\n", " ")) from None
