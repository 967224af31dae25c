"""Turn a fuzzer's input bytes into a damaged copy of a committed campaign spec or target config.

The seeds are the files users start from: the studies' specs (notebooks/*.yml),
the campaigns (campaigns/*.yml) and the target configs (target-configs/*.yml).
An input is a recipe read byte by byte (zeros once it is exhausted):

    <seed> <flags: high nibble = tree operations, bits 0-2 = text operations, bit 3 = --smoke>
    then per tree operation: <donor seed> <op> <u16 position> <u8 choice> <u8 choice>
    then per text operation: <op> <u16 line or offset> <u8 choice> <payload length> <payload>

Tree operations work on the file parsed (ruamel, as plain data) and written back, so the damage
lands on keys the loaders read: set a value to an extreme or hostile one (huge and negative
numbers, NaN, a path to /proc or /dev, an option-like or control-character string, a long list,
a deep mapping), delete, rename or add a key, copy a subtree of any seed over another, wrap a
value in a list or a mapping. Text operations then damage the YAML itself: duplicate, delete or
re-indent a line, put a YAML construct in a line (anchors, aliases, merge keys, tags such as
``!!python/object`` or LISA's ``!call:``, flow collections, directives, a second document, an
alias bomb, deep nesting), overwrite or insert raw bytes (not UTF-8, NUL, BOM), cut the file.
Outputs stay below 256 KiB (twice what the loader accepts).

The harness (fuzz_loaders.py) and the seeded test (tests/test_trust_fuzz_loaders.py) share this
module: a recipe means the same file for both, as long as the seeds are the same.
"""

from __future__ import annotations

import base64
import copy
import datetime
import functools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

__all__ = ["MAX_OUTPUT", "REPO", "SEED_GLOBS", "Case", "Seed", "load_seeds", "mutate"]

REPO = Path(__file__).resolve().parents[2]
SEED_GLOBS = (("spec", "notebooks/*.yml"), ("spec", "campaigns/*.yml"), ("target", "target-configs/*.yml"))
MAX_OUTPUT = 256 << 10

_INTS = [0, 1, -1, 2, 7, 24, 255, 4096, 65535, 65536, 86_400, 100_000, 604_801, 2**31 - 1, 2**31, 2**32,
         2**63 - 1, 2**63, 2**64, -2**63, 10**30, 10**99]
_FLOATS = [0.0, -0.0, 0.5, 1e-300, 1e308, float("inf"), float("-inf"), float("nan"), 1.5, -1.0, 2.0**53]
_STRINGS = [
    "", " ", "-", "-oProxyCommand=touch /tmp/pwned", "--help", "a b", "a\tb", "a\nb", "\x1b[2J\x1b[H", "\x00",
    "\u202eevil", "é", "../../../../etc/passwd", "/etc/shadow", "/dev/zero", "/dev/stdin", "/proc/self/environ",
    "/proc/self/mem", "/", ".", "..", "~", "~root/.ssh/id_rsa", "$(touch /tmp/pwned)", "`id`", "x;id", "a|b",
    "%s%n", "{0}", "{x}", "sched:*", "sched:sched_switch", "*", "fio", "rt-app", "host", "linux", "android",
    "interleave", "welch", "faithful", "devlib.platform.Platform", "subprocess.Popen", "os.system", "root",
    "192.168.0.1", "[::1]", "0x10", "1e9", "yes", "no", "null", "~", "True", "x" * 300, "y" * 70_000,
]
_VALUES: list[Any] = [
    *_INTS, *_FLOATS, *_STRINGS, True, False, None, [], {}, [None], [[[]]], {"": None}, {None: 1}, {1: 2},
    {"a": {"b": {"c": {"d": 1}}}}, list(range(1001)), ["sched:sched_switch"] * 1001, [{"name": "x"}] * 3,
    datetime.date(2001, 12, 14), datetime.datetime(2001, 12, 14, 21, 59, 43), b"\x00\xff",
]
_KEYS: list[Any] = [
    "name", "kind", "target", "iterations", "order", "trace", "events", "buffer-size-kb", "variants", "workloads",
    "knobs", "kernel", "options", "smoke", "android", "report", "baseline", "alpha", "test", "mean", "requires",
    "retries", "energy", "board-timing", "description", "workload-options", "target-conf", "platform-info",
    "lisa-ext", "host", "port", "username", "password", "keyfile", "device", "workdir", "devlib", "platform",
    "class", "args", "kernel", "modules", "make-variables", "CC", "CROSS_COMPILE", "reset-command",
    "reset-timeout-s", "probe-interval-s", "probe-misses", "excluded-modules", "lazy-platinfo", "<<", "", None,
    1, True, 1.5, "x" * 200, "/sys/kernel/debug/x", "/proc/sys/kernel/core_pattern", "a\nb", "\x1b]0;x\x07",
    ("a", "b"), (1,),
]
_CONSTRUCTS = [
    b"&a", b"*a", b"*zz", b"<<: *a", b"<<: [*a, *a]", b"!!python/object/apply:os.system ['id']",
    b"!!python/name:os.system", b"!call:os.system", b"!include /etc/passwd", b"!env:HOME", b"!var x",
    b"!!binary AAAA", b"!!set {a, b}", b"!!omap [a: 1]", b"!!timestamp 2001-12-14", b"!custom x", b"? [a, b]",
    b"? {a: 1}", b"{", b"[", b"}", b"]", b"{a: 1, a: 2}", b"[a, [b, [c]]]", b"|", b">-", b"'", b'"', b'"\\x00"',
    b'"\\u202e"', b"%YAML 1.1", b"%TAG ! tag:x,2000:", b"---", b"...", b"#", b"- ", b": ", b"\t", b"@", b"`",
    b"0o777", b"0x_1", b".inf", b"-.inf", b".nan", b"1_000", b"+1", b"1:20", b"2001-12-14", b"~", b"Null",
    b"yes", b"on", b"=", b"\xef\xbb\xbf", b"\xff\xfe", b"\x00", b"\x85", "\u2028".encode(),
]


def _bomb(width: int, depth: int) -> bytes:
    lines = [b"a0: &a0 [x, x]"]
    for i in range(1, depth):
        lines.append(b"a%d: &a%d [" % (i, i) + b", ".join([b"*a%d" % (i - 1)] * width) + b"]")
    return b"\n".join(lines) + b"\n"


_BLOCKS = [_bomb(9, 9), _bomb(2, 40), b"[" * 5000 + b"]" * 5000, b"{a: " * 60 + b"1" + b"}" * 60,
           b"- " * 200 + b"x", b"x: " + b"9" * 5000, b"x: -" + b"9" * 101, b"x: 1" + b"0" * 400 + b".5",
           b"a: &r [*r]", b"a: &r {b: *r}", b"---\nname: second\n", b"- list\n- at top\n", b"just a string\n",
           b"", b"\n" * 5000, b"#" * 200_000, b"x" * 140_000]


@dataclass(frozen=True)
class Seed:
    """One committed file: what it is (``spec`` or ``target``), where it lives, its bytes."""

    kind: str
    relative: str
    data: bytes


@dataclass(frozen=True)
class Case:
    """A damaged seed: the bytes to load and how."""

    seed: Seed
    data: bytes
    smoke: bool


def load_seeds(repo: Path = REPO) -> list[Seed]:
    return [Seed(kind, str(p.relative_to(repo)), p.read_bytes())
            for kind, pattern in SEED_GLOBS for p in sorted(repo.glob(pattern))]


class _Recipe:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def byte(self) -> int:
        value = self.data[self.at] if self.at < len(self.data) else 0
        self.at += 1
        return value

    def u16(self) -> int:
        return self.byte() | self.byte() << 8

    def pick(self, items: list) -> Any:
        return items[self.byte() % len(items)]

    def payload(self) -> bytes:
        size = self.byte()
        chunk = self.data[self.at:self.at + size]
        self.at += size
        return chunk


def _positions(node: Any, out: list) -> list:
    """``(container, key)`` of every entry of ``node``, in document order."""
    if isinstance(node, dict):
        for key in list(node):
            out.append((node, key))
            _positions(node[key], out)
    elif isinstance(node, list):
        for index in range(len(node)):
            out.append((node, index))
            _positions(node[index], out)
    return out


def _tree_op(recipe: _Recipe, tree: Any, donor: Any) -> None:
    op, where, first, second = recipe.byte() % 10, recipe.u16(), recipe.byte(), recipe.byte()
    positions = _positions(tree, [])
    if op >= 8:  # a value for one key wherever it is: reaches the keys loaders treat specially
        wanted = _KEYS[second % len(_KEYS)]
        positions = [(parent, key) for parent, key in positions if key == wanted] or positions
    if not positions:
        return
    parent, key = positions[where % len(positions)]
    value = copy.deepcopy(_VALUES[first % len(_VALUES)])
    if op in (0, 8, 9):  # an extreme or hostile value
        parent[key] = value
    elif op == 1:  # the entry removed
        del parent[key]
    elif op == 2 and isinstance(parent, dict):  # the key renamed (or a duplicate of another key)
        new_key = _KEYS[first % len(_KEYS)]
        parent[new_key] = parent.pop(key)
    elif op == 3:  # a subtree of another seed (or of this one) copied over
        entries = _positions(donor, [])
        if entries:
            source, source_key = entries[(second << 8 | first) % len(entries)]
            parent[key] = copy.deepcopy(source[source_key])
    elif op == 4:
        parent[key] = [parent[key]] if first % 2 else {_KEYS[second % len(_KEYS)]: parent[key]}
    elif op == 5 and isinstance(parent[key], dict):  # a key added
        parent[key][_KEYS[first % len(_KEYS)]] = copy.deepcopy(_VALUES[second % len(_VALUES)])
    elif op == 6 and isinstance(parent[key], list):  # an element added
        parent[key].append(value)
    else:  # a number where the file has one, or any value
        parent[key] = (_INTS + _FLOATS)[first % (len(_INTS) + len(_FLOATS))]


@functools.cache
def _parsed(seed: Seed) -> Any:
    """The seed's tree as plain data, parsed once: operations work on deep copies."""
    return YAML(typ="safe").load(seed.data)


_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./-]*")
_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}


def _scalar(value: Any) -> str:
    """One YAML scalar: plain when it reads back as the same string, else JSON's double quotes
    (valid YAML); numbers, booleans, null and dates as YAML writes them."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, float):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf") if math.isinf(value) else repr(value)
    if isinstance(value, (int, datetime.date)):
        return str(value) if isinstance(value, int) else value.isoformat()
    if isinstance(value, bytes):
        return "!!binary " + base64.b64encode(value).decode()
    text = str(value)
    return text if _PLAIN.fullmatch(text) and text.lower() not in _WORDS else json.dumps(text)


def _emit(node: Any, indent: str, out: list[str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            head = f"{indent}{_scalar(key)}:"
            if isinstance(key, tuple):  # a complex key, a flow sequence
                out.append(f"{indent}? [{', '.join(map(_scalar, key))}]")
                head = f"{indent}:"
            if isinstance(value, (dict, list)) and value:
                out.append(head)
                _emit(value, indent + "  ", out)
            else:
                out.append(f"{head} {'{}' if value == {} else '[]' if value == [] else _scalar(value)}")
    elif isinstance(node, list):
        for value in node:
            if isinstance(value, (dict, list)) and value:
                out.append(f"{indent}-")
                _emit(value, indent + "  ", out)
            else:
                out.append(f"{indent}- {'{}' if value == {} else '[]' if value == [] else _scalar(value)}")
    else:
        out.append(indent + _scalar(node))


def _dump(tree: Any) -> bytes:
    """``tree`` as block-style YAML, the way people write these files (ruamel's pure-Python
    emitter costs more than the loaders)."""
    out: list[str] = []
    _emit(tree, "", out)
    return ("\n".join(out) + "\n").encode("utf-8", "surrogatepass")


def _text_op(recipe: _Recipe, data: bytes) -> bytes:
    op, where, choice, payload = recipe.byte() % 8, recipe.u16(), recipe.byte(), recipe.payload()
    lines = data.split(b"\n")
    at = where % len(lines)
    line = lines[at]
    indent = line[:len(line) - len(line.lstrip(b" "))]
    if op == 0:  # a line duplicated: a duplicate key, or an entry twice
        lines.insert(at, line)
    elif op == 1:
        del lines[at]
    elif op == 2:  # re-indented
        lines[at] = (b" " * (choice % 5) if choice & 0x80 else b"\t") + line.lstrip(b" ")
    elif op == 3:  # a construct after the key, or in its place
        construct = _CONSTRUCTS[choice % len(_CONSTRUCTS)]
        head, colon, _ = line.partition(b": ")
        lines[at] = head + colon + construct if colon and choice & 1 else indent + construct + b" " + line.lstrip()
    elif op == 4:  # a block: alias bombs, deep nesting, huge numbers, a second document
        lines.insert(at, _BLOCKS[choice % len(_BLOCKS)])
    elif op == 5:  # raw bytes over the file
        offset = where % (len(data) + 1)
        return data[:offset] + payload + data[offset + len(payload):]
    elif op == 6:  # raw bytes into the file
        offset = where % (len(data) + 1)
        return data[:offset] + payload + data[offset:]
    else:  # cut short
        return data[:where % (len(data) + 1)]
    return b"\n".join(lines)


def mutate(data: bytes, seeds: list[Seed]) -> Case:
    """The damaged file the recipe ``data`` describes (see the module docstring)."""
    recipe = _Recipe(data)
    seed = seeds[recipe.byte() % len(seeds)]
    flags = recipe.byte()
    tree_ops, text_ops, smoke = flags >> 4, flags & 7, bool(flags & 8)
    out = seed.data
    if tree_ops:
        tree = copy.deepcopy(_parsed(seed))
        for _ in range(tree_ops):
            donor = _parsed(seeds[recipe.byte() % len(seeds)])
            try:
                _tree_op(recipe, tree, donor)
            except Exception:  # noqa: BLE001  (an operation the tree cannot take: the file keeps the others)
                continue
        try:
            out = _dump(tree)
        except Exception:  # noqa: BLE001  (a value ruamel cannot write: keep the undamaged text)
            out = seed.data
    for _ in range(text_ops):
        out = _text_op(recipe, out)[:MAX_OUTPUT]
    return Case(seed, out[:MAX_OUTPUT], smoke)
