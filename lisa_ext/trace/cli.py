"""``lisa-ext trace``: convert traces to parquet, print event counts.

* ``lisa-ext trace convert TRACE -o DIR`` writes ``DIR/<event>.parquet`` (one
  typed table per event, columns as in :mod:`lisa_ext.trace.tables`) and
  ``DIR/meta.json`` (cpus, clock, file version, event counts, files written).
* ``lisa-ext trace stats TRACE [--json]`` prints the number of records per
  event; the JSON shape is ``{"events": {"sched_switch": N, ...}, "cpus": N}``.
* ``lisa-ext trace export --perfetto RUN_OR_TRACE -o FILE.pftrace`` writes a
  Perfetto trace of the events and the analyses' findings
  (:mod:`lisa_ext.report.perfetto`).

trace.dat files go through the native decoder (:mod:`lisa_ext.trace.tracedat`);
text and systrace files through :func:`lisa_ext.trace.read_trace`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lisa_ext.errors import UserError
from lisa_ext.trace import read_trace, tracedat
from lisa_ext.trace.tracedat import MAGIC, TraceDatReader, count_events, read_tracedat
from lisa_ext.trace.cache import parquet_options
from lisa_ext.trace.strip import shrink_trace

__all__ = ["register", "convert", "stats", "event_file_name"]

META_FILE = "meta.json"


def event_file_name(event: str) -> str:
    """Parquet file name of an event ("sched:sched_switch" -> "sched__sched_switch.parquet")."""
    return re.sub(r"[^\w.-]", "_", event.replace(":", "__")) + ".parquet"


def _is_tracedat(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None


def _read(path: str, events):
    if _is_tracedat(path):
        return read_tracedat(path, events)

    return read_trace(path, events, cache=False)


def _earlier_conversion(out: Path) -> list[str] | None:
    """The parquet files of the earlier conversion ``out`` holds, ``None`` when it holds anything
    else: a ``meta.json`` as :func:`convert` writes it, naming every other file there."""
    try:
        old = json.loads((out / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files = old.get("files") if isinstance(old, dict) else None
    if not isinstance(files, dict) or not isinstance(old.get("rows"), dict):
        return None
    names = [name for name in files.values()
             if isinstance(name, str) and name == os.path.basename(name) and name.endswith(".parquet")]
    if len(names) != len(files):
        return None
    if any(entry.name not in {META_FILE, *names} for entry in out.iterdir()):
        return None
    return names


def _prepare_out_dir(out: Path) -> None:
    """Create DIR, or reuse one holding only an earlier conversion (its files are replaced);
    anything else already there is refused, never removed."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    if not any(out.iterdir()):
        return
    previous = _earlier_conversion(out)
    if previous is None:
        raise UserError(f"{out}: directory is not empty and holds more than an earlier conversion; choose a new one")
    for name in previous:
        (out / name).unlink(missing_ok=True)
    (out / META_FILE).unlink()


def _tracedat_passes(reader, events) -> list[list[str]]:
    """Events to decode per pass: two passes (heaviest events first) on large
    uncompressed files, so that writing the first overlaps decoding the second."""
    info = reader.info
    big = sum(size for _, _, size in info.streams) >= tracedat.PARALLEL_MIN_BYTES
    if info.compression != "none" or not big or (os.cpu_count() or 1) < 2:
        return [list(events) if events is not None else None]
    names = reader.event_names(events)
    counts = reader.record_counts()
    by_weight = sorted(names, key=lambda e: -counts.get(e, 0))
    total = sum(counts.get(e, 0) for e in names)
    first, acc = [], 0
    for event in by_weight:
        if acc and acc + counts.get(event, 0) > total * 0.55:
            break
        first.append(event)
        acc += counts.get(event, 0)
    rest = [e for e in names if e not in first]
    return [first, rest] if rest else [first]


def convert(path: str | os.PathLike, out_dir: str | os.PathLike, events=None,
            compression: str = "zstd", threads: int | None = None) -> dict:
    """Write one parquet file per event and meta.json; returns the meta written."""
    # deferred: pyarrow/numpy (~0.5 s) load only when tables are built; `lisa-ext trace stats` never needs them
    import pyarrow.parquet as pq

    path = os.fspath(path)
    out = Path(out_dir)
    workers = threads or min(4, os.cpu_count() or 1)
    meta = None
    files: dict[str, str] = {}
    rows: dict[str, int] = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending = []

        def write(tables, event):
            table = tables.tables[event]
            pq.write_table(table, out / files[event], **parquet_options(table, compression))

        if _is_tracedat(path):
            reader = TraceDatReader(path)
            passes = _tracedat_passes(reader, events)
            reads = (reader.read(group, threads=1 if k else None) for k, group in enumerate(passes))
        else:
            reads = iter([_read(path, events)])
        for k, tables in enumerate(reads):
            if k == 0:
                _prepare_out_dir(out)
                meta = dict(tables.meta)
            else:
                meta["warnings"] = list(dict.fromkeys(meta.get("warnings", []) + tables.meta.get("warnings", [])))
            # Largest tables first keeps the writers busy; parquet encoding releases the GIL,
            # so the next pass decodes meanwhile.
            for event in sorted(tables.tables, key=lambda e: -tables.tables[e].nbytes):
                files[event] = event_file_name(event)
                rows[event] = tables.tables[event].num_rows
                pending.append(pool.submit(write, tables, event))
        for future in pending:
            future.result()
    meta["files"] = dict(sorted(files.items()))
    meta["rows"] = dict(sorted(rows.items()))
    (out / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    return meta


def stats(path: str | os.PathLike) -> dict:
    """``{"events": {name: count}, "cpus": n, ...}`` for any supported trace file."""
    path = os.fspath(path)
    if _is_tracedat(path):
        return count_events(path)
    tables = _read(path, None)
    meta = dict(tables.meta)
    return {"events": dict(meta.pop("event_counts")), "cpus": meta.pop("cpus"), **meta}


def _print_warnings(meta: dict) -> None:
    for warning in meta.get("warnings") or []:
        print(f"lisa-ext trace: warning: {warning}", file=sys.stderr)


def _cmd_convert(args) -> int:
    events = [e for part in args.events for e in part.split(",") if e] if args.events else None
    meta = convert(args.trace, args.out, events, compression=args.compression)
    _print_warnings(meta)
    total = sum(meta["rows"].values())
    print(f"{args.trace}: {total} events in {len(meta['files'])} tables -> {args.out}")
    return 0


def _cmd_stats(args) -> int:
    result = stats(args.trace)
    _print_warnings(result)
    if args.json:
        print(json.dumps({"events": result["events"], "cpus": result["cpus"]}, indent=2))
        return 0
    width = max([len(e) for e in result["events"]] + [5])
    for event, n in sorted(result["events"].items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{event:<{width}}  {n:>12,}")
    print(f"{'total':<{width}}  {sum(result['events'].values()):>12,}")
    extra = [f"cpus={result['cpus']}"]
    for key in ("clock", "file_version", "compression"):
        if result.get(key) is not None:
            extra.append(f"{key}={result[key]}")
    print("  ".join(extra))
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    # deferred: the findings need the analyses (LISA), which `trace stats` and `convert` never load
    from lisa_ext.report.perfetto import export_perfetto

    if not args.perfetto:
        raise UserError("trace export: choose a format: --perfetto (the only one so far)")
    summary = export_perfetto(args.source, args.out, findings=args.findings, model=args.model,
                              marked=args.marked)
    for note in summary["notes"]:
        print(f"lisa-ext trace export: note: {note}", file=sys.stderr)
    if summary["dropped"]:
        lost = "; ".join(f"{e}.{', '.join(c)}" for e, c in sorted(summary["dropped"].items()))
        print(f"lisa-ext trace export: note: fields Perfetto's messages lack, not exported: {lost}",
              file=sys.stderr)
    tracks = sum(summary["tracks"].values())
    print(f"{args.out}: {sum(summary['events'].values())} events ({len(summary['typed'])} kinds as "
          f"Perfetto's own messages, {len(summary['generic'])} generic) on {summary['cpus']} CPUs, "
          f"{summary['threads']} threads, {len(summary['tracks'])} finding tracks ({tracks} items); "
          f"open it on https://ui.perfetto.dev or with trace_processor")
    return 0


def _cmd_shrink(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.is_dir() or (out.exists() and not _is_tracedat(args.out)):
        raise UserError(f"{out}: exists and is not a trace.dat; it is not overwritten: choose another -o")
    before, after = shrink_trace(args.trace, args.out)
    print(f"{args.out}: {after} bytes ({before} before)")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("trace", help="convert trace.dat / text traces to Arrow tables",
                              description="Convert a trace (trace.dat v6/v7, ftrace text, systrace "
                                          "HTML) to one parquet table per event, or count its events.")
    sub = p.add_subparsers(dest="trace_command", metavar="ACTION")
    sub.required = True

    c = sub.add_parser("convert", help="write one parquet file per event plus meta.json",
                       description="Write DIR/<event>.parquet (one typed table per event) and "
                                   "DIR/meta.json (CPUs, clock, file version, event counts).")
    c.add_argument("trace", metavar="TRACE", help="trace.dat (v6/v7), ftrace text or systrace HTML")
    c.add_argument("-o", "--out", required=True, metavar="DIR", help="output directory")
    c.add_argument("-e", "--events", action="append", metavar="EVENTS",
                   help="events to convert (comma separated, repeatable); default: all recorded")
    c.add_argument("--compression", default="zstd", choices=["zstd", "snappy", "lz4", "gzip", "none"],
                   help="parquet compression (default: zstd)")
    c.set_defaults(func=_cmd_convert)

    s = sub.add_parser("stats", help="print the number of records per event",
                       description="Print the number of records per event of a trace.")
    s.add_argument("trace", metavar="TRACE", help="trace.dat (v6/v7), ftrace text or systrace HTML")
    s.add_argument("--json", action="store_true", help='print {"events": {...}, "cpus": N}')
    s.set_defaults(func=_cmd_stats)

    x = sub.add_parser("export", help="write a run or trace as a Perfetto trace (.pftrace)",
                       description="Write the events of a trace (or of a run directory's trace.dat) "
                                   "as a Perfetto protobuf trace, with the analyses' findings (idle "
                                   "misses, wake-up latencies, IO-wait sleeps and boosts, gated idle, "
                                   "estimated power) as tracks. Open it on ui.perfetto.dev or with "
                                   "trace_processor.")
    x.add_argument("source", metavar="RUN_OR_TRACE", help="run directory or trace file")
    x.add_argument("--perfetto", action="store_true", required=True,
                   help="Perfetto's protobuf format (the only format so far)")
    x.add_argument("-o", "--out", required=True, metavar="FILE", help="output file (.pftrace)")
    x.add_argument("--no-findings", dest="findings", action="store_false",
                   help="events only: skip the analyses (no LISA; faster)")
    x.add_argument("--model", metavar="MODEL",
                   help="power model for the power/energy tracks (default: the run's meter's)")
    x.add_argument("--marked", metavar="PREFIXES",
                   help="comm prefixes of latency-sensitive tasks for the gated idle track")
    x.set_defaults(func=_cmd_export)

    k = sub.add_parser("shrink", help="write a small copy of a trace.dat for committing as sample data",
                       description="Write TRACE as a version 7, zstd-compressed trace.dat without the "
                                   "kallsyms entries its events do not resolve to (every event kept, "
                                   "trace-cmd report prints the same). Needs trace-cmd.")
    k.add_argument("trace", metavar="TRACE", help="trace.dat (v6/v7)")
    k.add_argument("-o", "--out", required=True, metavar="FILE", help="output trace.dat")
    k.set_defaults(func=_cmd_shrink)
