"""YAML input files: one loader and a small declarative checker.

Campaign specs, workload options, target configs, RFC-number files and the
store's copy of a spec are all read with :func:`load_yaml` and checked with
:func:`check_mapping`. A leaf of the package: it imports nothing of lisa_ext
but :mod:`lisa_ext.errors`, so every layer may use it.

Each input is checked before anything runs; the first problem becomes a
:class:`~lisa_ext.errors.SpecError` naming the file, the dotted key (with the
YAML line when known) and what is allowed there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from lisa_ext.errors import SpecError

__all__ = ["Field", "Number", "check_mapping", "load_yaml", "positive", "type_names"]

#: a YAML number: ints are accepted wherever floats are
Number = (int, float)


@dataclass(frozen=True)
class Field:
    """One allowed key: its accepted types, whether it must be present, a help text."""

    types: tuple[type, ...]
    help: str
    required: bool = False
    check: Callable[[Any], str | None] | None = field(default=None)
    """Extra validation returning a problem description, or None when fine."""


def positive(value: Any) -> str | None:
    """A :attr:`Field.check` for numbers that must be above zero."""
    return None if value > 0 else "must be positive"


def type_names(types: tuple[type, ...]) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string",
             list: "list", dict: "mapping", type(None): "null"}
    return " or ".join(dict.fromkeys(names.get(t, t.__name__) for t in types))


def _is_instance(value: Any, types: tuple[type, ...]) -> bool:
    # YAML booleans are ints in Python: never accept true/false for a number
    if isinstance(value, bool) and bool not in types:
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
                            f"got {type_names((type(value),))} {value!r}")
        if spec.check is not None:
            problem = spec.check(value)
            if problem:
                raise SpecError(path, dotted + _where(node, key), problem)
    for key, spec in schema.items():
        if spec.required and key not in node:
            dotted = f"{prefix}.{key}" if prefix else key
            raise SpecError(path, dotted, f"missing required key ({spec.help})")
    return dict(node)


def load_yaml(path: str | os.PathLike, what: str) -> Any:
    """Parse a YAML file keeping line numbers; missing or unparsable files are SpecErrors."""
    if not os.path.isfile(path):
        raise SpecError(path, what, "file not found")
    try:
        with open(path, encoding="utf-8") as f:
            return YAML(typ="rt").load(f)
    except YAMLError as exc:
        raise SpecError(path, what, f"not valid YAML: {exc}".replace("\n", " ")) from exc
