"""Independent oracle for the trace.dat decoder: parse `trace-cmd report` text.

Runs ``trace-cmd report -N -R -t`` (no plugins, raw field values, nanosecond
timestamps) and ``trace-cmd report -N -t`` (for the printed text of print and
bprint records), and splits each line into timestamp, CPU, pid, comm, event
and ``name=value`` fields. Nothing here imports lisa_ext: expected values come
from trace-cmd/libtraceevent only. Values are compared with the decoder's
tables by :func:`compare`, which knows how libtraceevent prints each kind of
field (``tep_print_field_content``): decimal or hex integers, symbol names for
pointers it can resolve, strings, and ``ARRAY[xx, ...]`` byte dumps.
"""

from __future__ import annotations

import bisect
import re
import subprocess
import warnings
from collections import defaultdict
from dataclasses import dataclass, field

__all__ = ["ReportEvents", "compare", "kallsyms", "report_stdout", "run_report", "saved_clock"]


@dataclass
class ReportEvents:
    """Per event: parallel lists of timestamp (ns), cpu, pid, comm and the text after "event:"."""

    ts: dict = field(default_factory=lambda: defaultdict(list))
    cpu: dict = field(default_factory=lambda: defaultdict(list))
    pid: dict = field(default_factory=lambda: defaultdict(list))
    comm: dict = field(default_factory=lambda: defaultdict(list))
    text: dict = field(default_factory=lambda: defaultdict(list))
    unparsed: list = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {name: len(v) for name, v in sorted(self.ts.items())}


def _line_re(instances: list[str]) -> re.Pattern:
    inst = "|".join(re.escape(i) for i in instances if i)
    prefix = rf"(?:(?:{inst}):)?" if inst else ""
    return re.compile(
        rf"^{prefix}\s*(?P<comm>.*?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<ts>\d+)\.(?P<frac>\d+): "
        r"(?P<event>[^\s:]+):\s?(?P<rest>.*)$"
    )


def report_stdout(args: list[str], instances: list[str] = (), events: set[str] = frozenset()) -> str:
    """What ``trace-cmd report ARGS`` prints, holding a line of each of ``events`` (at least one
    event line when none is named).

    Two full ``make test`` runs (CI on 4d96d67 and a CI-like run on 2026-11-25, with other pytest
    processes and QEMU boards beside them) got a report of example_rtapp_trace.dat without the
    print and bprint lines the same command prints every other time; never with the test alone,
    nor in 280 reports in a row here. The cause is not known. So that the oracle does not blame
    the decoder for it, a report that lacks one of them is run once more, and what the first run
    gave is kept in a warning for whoever finds the cause; the second one is returned as it is.
    """
    line_re = _line_re(list(instances))
    for attempt in (1, 2):
        proc = subprocess.run(args, capture_output=True, text=True, errors="replace", check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {proc.stderr[-2000:]}")
        printed = {m["event"] for m in map(line_re.match, proc.stdout.splitlines()) if m}
        if printed and set(events) <= printed:
            return proc.stdout
        if attempt == 1:
            warnings.warn(f"{' '.join(args)} printed events {sorted(printed)}, not {sorted(events)} (exit 0, "
                          f"{len(proc.stdout)} bytes, stdout {proc.stdout[:300]!r}, stderr "
                          f"{proc.stderr[-300:]!r}); ran it again")
    return proc.stdout


def run_report(path: str, raw: bool, instances: list[str] = (), events: set[str] = frozenset()) -> ReportEvents:
    """The report's events; ``events``: those it must print (:func:`report_stdout`)."""
    args = ["trace-cmd", "report", "-N", "-t"] + (["-R"] if raw else []) + [path]
    stdout = report_stdout(args, instances, events)
    line_re = _line_re(list(instances))
    out = ReportEvents()
    last = None
    for line in stdout.splitlines():
        m = line_re.match(line)
        if m is None:
            if last is not None and last in ("print", "bprint"):
                out.text[last][-1] += "\n" + line  # the printed text spans lines
            elif line.strip() and not line.startswith("cpus="):
                out.unparsed.append(line)
            continue
        event = m["event"]
        frac = m["frac"]
        scale = 10 ** (9 - len(frac))
        out.ts[event].append(int(m["ts"]) * 1_000_000_000 + int(frac) * scale)
        out.cpu[event].append(int(m["cpu"]))
        out.pid[event].append(int(m["pid"]))
        out.comm[event].append(m["comm"].strip())
        # raw mode pads event names to a column: drop the padding
        out.text[event].append(m["rest"].lstrip(" ") if raw else m["rest"])
        last = event
    return out


def kallsyms(path: str) -> tuple[list[int], list[str]]:
    """Sorted (addresses, names) of the file's kallsyms, via `trace-cmd dump`."""
    proc = subprocess.run(["trace-cmd", "dump", "--kallsyms", path], capture_output=True, text=True,
                          errors="replace", check=False)
    syms = []
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and re.fullmatch(r"[0-9a-fA-F]{6,16}", parts[0]):
            syms.append((int(parts[0], 16), parts[2]))
    syms.sort()
    return [a for a, _ in syms], [n for _, n in syms]


def saved_clock(path: str) -> str:
    """The selected trace clock per `trace-cmd dump --clock`, "unknown" when none is saved."""
    proc = subprocess.run(["trace-cmd", "dump", "--clock", path], capture_output=True, text=True,
                          errors="replace", check=False)
    m = re.search(r"\[([\w-]+)\]", proc.stdout.replace("[Tracing clock]", ""))
    return m[1] if m else "unknown"


def split_fields(text: str, names: list[str]) -> list[str] | None:
    """Values of "n1=v1 n2=v2 ..." for the given names in order, or None if the text does not fit."""
    if not names:
        return []
    if not text.startswith(names[0] + "="):
        return None
    values = []
    pos = len(names[0]) + 1
    for nxt in names[1:]:
        k = text.find(" " + nxt + "=", pos)
        if k < 0:
            return None
        values.append(text[pos:k])
        pos = k + len(nxt) + 2
    values.append(text[pos:])
    return values


_ARRAY_RE = re.compile(r"^ARRAY\[(.*)\]$")


def _array_bytes(value: str) -> bytes | None:
    m = _ARRAY_RE.match(value)
    if not m:
        return None
    inner = m[1].strip()
    return bytes(int(x, 16) for x in inner.split(",")) if inner else b""


def _int_matches(text: str, value: int, bits: int, syms) -> bool:
    mask = (1 << bits) - 1
    t = text.strip()
    try:
        expected = int(t, 16) if t.lower().startswith(("0x", "-0x")) else int(t)
        return (expected & mask) == (value & mask)
    except ValueError:
        pass
    # libtraceevent printed a symbol for a pointer-sized value it could resolve
    addrs, names = syms
    i = bisect.bisect_right(addrs, value & mask) - 1
    return i >= 0 and names[i] == t.split("+")[0]


def _list_bytes(values: list[int], elem_bits: int) -> bytes:
    size = elem_bits // 8
    return b"".join((v & ((1 << elem_bits) - 1)).to_bytes(size, "little") for v in values)


def _value_matches(text: str, value, arrow_type, syms) -> bool:
    import pyarrow as pa

    if pa.types.is_integer(arrow_type):
        return _int_matches(text, value, arrow_type.bit_width, syms)
    if pa.types.is_string(arrow_type):
        raw = _array_bytes(text)
        if raw is not None:  # not printable: libtraceevent dumped the bytes
            return raw.split(b"\0", 1)[0] == value.encode("utf-8", "replace") or \
                raw.split(b"\0", 1)[0].decode("utf-8", "replace").replace("\ufffd", "?") == value
        return text == value
    if pa.types.is_list(arrow_type):
        got = _list_bytes(value, arrow_type.value_type.bit_width)
        raw = _array_bytes(text)
        if raw is not None:
            return raw == got
        # u8 arrays libtraceevent considered printable are shown as text
        return text.encode() == got.split(b"\0", 1)[0]
    raise AssertionError(f"unexpected column type {arrow_type}")


def compare(tables, raw: ReportEvents, printed: ReportEvents | None, syms, max_errors: int = 20) -> list[str]:
    """Differences between the decoder's tables and the report text (empty when equal)."""
    errors: list[str] = []

    def err(msg):
        if len(errors) < max_errors:
            errors.append(msg)

    counts = raw.counts()
    for event, n in counts.items():
        if event not in tables:
            err(f"{event}: {n} rows in the report, no table")
            continue
        table = tables[event]
        if table.num_rows != n:
            err(f"{event}: {table.num_rows} rows, report has {n}")
            continue
        for col, expected in (("__timestamp", raw.ts[event]), ("__cpu", raw.cpu[event]),
                              ("__pid", raw.pid[event]), ("__comm", raw.comm[event])):
            got = table.column(col).to_pylist()
            if got != expected:
                k = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
                err(f"{event}: row {k}: {col} = {got[k]!r}, report says {expected[k]!r}")
        names = [f for f in table.column_names if not f.startswith("__")]
        if event in ("print", "bprint"):
            if printed is None:
                err(f"{event}: no printed report to compare the text with")
                continue
            texts = [t.split(": ", 1)[1] if ": " in t else t for t in printed.text[event]]
            got = table.column("buf").to_pylist()
            if got != texts:
                k = next((i for i, (a, b) in enumerate(zip(got, texts)) if a != b), min(len(got), len(texts)))
                err(f"{event}: row {k}: buf = {got[k] if k < len(got) else None!r}, "
                    f"report prints {texts[k] if k < len(texts) else None!r}")
            names = ["ip"]
            if event == "print":
                # raw mode prints "ip=<sym> buf=<text>"
                pass
        columns = {name: table.column(name).to_pylist() for name in names}
        types = {name: table.schema.field(name).type for name in names}
        for row, text in enumerate(raw.text[event]):
            values = split_fields(text, names) if event not in ("print", "bprint") else \
                [text.split(" ", 1)[0].partition("=")[2]]
            if values is None:
                err(f"{event}: row {row}: report text {text!r} does not list fields {names}")
                continue
            for name, value_text in zip(names, values):
                if not _value_matches(value_text, columns[name][row], types[name], syms):
                    err(f"{event}: row {row}: {name} = {columns[name][row]!r}, report says {value_text!r}")
    for event, table in tables.items():
        if event not in counts and table.num_rows:
            err(f"{event}: {table.num_rows} rows, none in the report")
    return errors
