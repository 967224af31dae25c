"""Write a trace as a Perfetto protobuf trace (``.pftrace``), findings as extra tracks.

Perfetto (ui.perfetto.dev, ``trace_processor``) cannot read trace.dat; this
writes the events of any trace :func:`lisa_ext.trace.read_trace` reads in
Perfetto's own format, with Perfetto's published protos
(``perfetto.protos.perfetto.trace.perfetto_trace_pb2``, the ``perfetto`` package):

* every ftrace event becomes an ``FtraceEvent`` in a per-CPU
  ``FtraceEventBundle`` (time order within each CPU). An event Perfetto has a
  message for (``sched_switch``, ``sched_waking``/``sched_wakeup``,
  ``cpu_frequency``, ``cpu_idle``, ``workqueue_*``, ``block_rq_*``, ``print``
  and a few hundred more: the fields of ``FtraceEvent`` named like the event)
  uses that message, its fields filled from the columns of the same name; a
  column the message lacks is dropped (listed in the result's ``dropped``).
  Every other event (``bprint``, which Perfetto has no message for, included)
  is a ``GenericFtraceEvent`` holding every column;
* the bundle's ``ftrace_clock`` is the trace's clock (``local``, ``global``,
  ``mono_raw``; ``boot`` and clocks Perfetto has no name for are left
  unspecified, i.e. boot time). Perfetto maps the per-CPU clocks ``local`` and
  ``global`` to boot time through a snapshot in each bundle; the snapshots here
  say they are equal, so every timestamp stays the trace's own nanoseconds;
* ``CpuInfo`` lists the trace's CPUs (also those that recorded nothing) and
  ``SystemInfo.num_cpus`` their number; a ``ProcessTree`` names every thread
  (pid -> last command seen). trace.dat records no thread groups, so threads
  are not grouped into processes;
* :class:`Track` objects (findings of the analyses, made above this layer)
  become Perfetto tracks of slices, instants or counters
  (``TrackDescriptor`` + ``TrackEvent``), optionally grouped under a parent track.

The file is written packet by packet (``Trace.packet`` is field 1, length
delimited), so memory stays that of one bundle beyond the tables.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Sequence

from lisa_ext.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

    from lisa_ext.trace.tables import TraceTables

__all__ = ["BUNDLE_EVENTS", "FTRACE_CLOCKS", "Track", "ftrace_message", "write_pftrace"]

# Deferred imports in this module: pyarrow, numpy and the protobuf classes (~0.2 s) load only
# when a file is written.

#: events per FtraceEventBundle packet
BUNDLE_EVENTS = 2048
#: trace-cmd clock name -> Perfetto's FtraceClock value name
FTRACE_CLOCKS = {"local": "FTRACE_CLOCK_LOCAL", "global": "FTRACE_CLOCK_GLOBAL",
                 "mono_raw": "FTRACE_CLOCK_MONO_RAW"}
#: sequence ids of our packets: the ftrace bundles, and the findings' track events
_FTRACE_SEQUENCE, _TRACK_SEQUENCE = 1, 2
#: task state letters as the kernel prints them (TASK_REPORT bits, "+" preempted)
_STATE_BITS = {"R": 0, "S": 1, "D": 2, "T": 4, "t": 8, "X": 16, "Z": 32, "P": 64, "I": 128,
               "+": 256}


@dataclass
class Track:
    """A track of findings to show beside the events.

    :param name: the track's name in Perfetto
    :param kind: ``"slice"`` (rows ``ts``, ``dur``, ``name``), ``"instant"``
        (``ts``, ``name``) or ``"counter"`` (``ts``, ``value``); ``ts``/``dur``
        in nanoseconds of the trace's clock
    :param rows: a DataFrame with those columns
    :param group: name of a parent track grouping this one (e.g. one track per task)
    :param unit: a counter's unit (e.g. ``"mW"``)
    """

    name: str
    kind: str
    rows: "pd.DataFrame"
    group: str | None = None
    unit: str | None = None


@dataclass
class _Column:
    proto: str        # field name in the message, or in the generic event
    values: list      # one Python value per row (None: unset)


@dataclass
class _EventPlan:
    name: str
    message: str | None          # FtraceEvent field, None for a generic event
    columns: list[_Column] = field(default_factory=list)


def _pb():
    # deferred: see the note under __all__
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2
    except ImportError as exc:  # the package is a dependency; a broken install says so
        raise UserError(f"Perfetto export needs the 'perfetto' package (pip install perfetto): {exc}") from None
    return perfetto_trace_pb2


def ftrace_message(event: str):
    """Descriptor of Perfetto's message for ftrace event ``event`` (None when
    Perfetto has none: the event is then written as a generic event)."""
    descriptor = _pb().FtraceEvent.DESCRIPTOR.fields_by_name.get(event)
    if descriptor is None or descriptor.message_type is None or event == "generic":
        return None
    if not descriptor.message_type.name.endswith("FtraceEvent"):
        return None
    return descriptor.message_type


def _int_range(field_descriptor) -> tuple[int, int, bool] | None:
    """(bits, mask, signed) of an integer proto field, None for other types."""
    fd = field_descriptor
    bits = {fd.CPPTYPE_INT32: (32, True), fd.CPPTYPE_INT64: (64, True),
            fd.CPPTYPE_UINT32: (32, False), fd.CPPTYPE_UINT64: (64, False)}.get(fd.cpp_type)
    if bits is None:
        return None
    return bits[0], (1 << bits[0]) - 1, bits[1]


def _wrap(value: int, bits: int, mask: int, signed: bool) -> int:
    value &= mask
    return value - (1 << bits) if signed and value >> (bits - 1) else value


def _as_int(value) -> int | None:
    """An int from a text trace's value: a number, hex, or a task state ("R+", "S", "D|K")."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    text = str(value).strip()
    try:
        return int(text, 0)
    except ValueError:
        pass
    if text and all(ch in _STATE_BITS or ch == "|" for ch in text):
        return sum(_STATE_BITS[ch] for ch in text if ch != "|")
    return None


def _typed_plan(name: str, table, message, dropped: dict[str, list[str]]) -> _EventPlan:
    import pyarrow as pa  # deferred: see the note under __all__

    plan = _EventPlan(name, name)
    fields = message.fields_by_name
    for column in table.column_names:
        if column.startswith("__"):
            continue
        fd = fields.get(column)
        if fd is None or fd.is_repeated:
            dropped.setdefault(name, []).append(column)
            continue
        values = table.column(column).to_pylist()
        arrow_type = table.schema.field(column).type
        if fd.cpp_type == fd.CPPTYPE_STRING:
            plan.columns.append(_Column(column, [None if v is None else str(v) for v in values]))
            continue
        if fd.cpp_type == fd.CPPTYPE_BOOL:
            plan.columns.append(_Column(column, [None if v is None else bool(_as_int(v)) for v in values]))
            continue
        limits = _int_range(fd)
        if limits is None or pa.types.is_list(arrow_type):
            dropped.setdefault(name, []).append(column)
            continue
        ints = values if pa.types.is_integer(arrow_type) else [None if v is None else _as_int(v)
                                                                for v in values]
        plan.columns.append(_Column(column, [None if v is None else _wrap(v, *limits) for v in ints]))
    return plan


def _generic_plan(name: str, table) -> _EventPlan:
    import pyarrow as pa  # deferred: see the note under __all__

    plan = _EventPlan(name, None)
    for column in table.column_names:
        if column.startswith("__"):
            continue
        arrow_type = table.schema.field(column).type
        values = table.column(column).to_pylist()
        if pa.types.is_signed_integer(arrow_type):
            kind = "int_value"
        elif pa.types.is_unsigned_integer(arrow_type):
            kind = "uint_value"
        else:
            kind = "str_value"
            values = [None if v is None else (v if isinstance(v, str) else str(v)) for v in values]
        plan.columns.append(_Column(f"{kind}:{column}", values))
    return plan


class _PacketWriter:
    """``Trace.packet`` records appended to a binary file."""

    def __init__(self, f):
        self._f = f
        self.packets = 0

    def write(self, packet) -> None:
        data = packet.SerializeToString()
        header = bytearray([0x0A])  # field 1, wire type 2
        n = len(data)
        while n >= 0x80:
            header.append((n & 0x7F) | 0x80)
            n >>= 7
        header.append(n)
        self._f.write(bytes(header))
        self._f.write(data)
        self.packets += 1


def _event_order(tables: "TraceTables", names: list[str]):
    """Rows of every event in (cpu, timestamp) order, ties in table then row order:
    arrays (cpu, timestamp, table index, row index)."""
    import numpy as np  # deferred: see the note under __all__

    ts, cpu, which, row = [], [], [], []
    for k, name in enumerate(names):
        table = tables[name]
        n = table.num_rows
        ts.append(table.column("__timestamp").to_numpy(zero_copy_only=False).astype(np.int64))
        cpu.append(table.column("__cpu").to_numpy(zero_copy_only=False).astype(np.int64))
        which.append(np.full(n, k, dtype=np.int32))
        row.append(np.arange(n, dtype=np.int64))
    if not ts:
        return (np.zeros(0, np.int64),) * 2 + (np.zeros(0, np.int32), np.zeros(0, np.int64))
    ts, cpu, which, row = (np.concatenate(a) for a in (ts, cpu, which, row))
    order = np.lexsort((row, which, ts, cpu))
    return cpu[order], ts[order], which[order], row[order]


def _thread_names(tables: "TraceTables", names: list[str]) -> dict[int, str]:
    """pid -> the command of its last event (saved cmdlines / task names)."""
    import numpy as np  # deferred: see the note under __all__

    last: dict[int, tuple[int, str]] = {}

    def note(pids, comms, ts):
        for pid, comm, t in zip(pids, comms, ts):
            if pid and comm and comm != "<...>" and (pid not in last or last[pid][0] <= t):
                last[pid] = (t, comm)

    for name in names:
        table = tables[name]
        if not table.num_rows:
            continue
        ts = table.column("__timestamp").to_numpy(zero_copy_only=False).astype(np.int64)
        pids = table.column("__pid").to_numpy(zero_copy_only=False).astype(np.int64)
        comms = table.column("__comm").to_pylist()
        note(pids.tolist(), comms, ts.tolist())
        for pid_col, comm_col in (("prev_pid", "prev_comm"), ("next_pid", "next_comm"),
                                  ("pid", "comm")):
            if pid_col in table.column_names and comm_col in table.column_names:
                note(table.column(pid_col).to_pylist(), table.column(comm_col).to_pylist(),
                     ts.tolist())
    return {pid: comm for pid, (_, comm) in sorted(last.items())}


def _ftrace_clock(pb, clock: str | None):
    name = FTRACE_CLOCKS.get((clock or "").lower())
    return getattr(pb, name) if name else None


def _write_events(writer: _PacketWriter, pb, tables: "TraceTables", plans: list[_EventPlan],
                  names: list[str], clock, lost_cpus: set[int]) -> dict[int, int]:
    """The per-CPU bundles; returns events written per CPU."""
    cpu, ts, which, row = _event_order(tables, names)
    pids = [tables[n].column("__pid").to_pylist() for n in names]
    per_cpu: dict[int, int] = {}
    n = len(ts)
    start = 0
    cpu_list, ts_list, which_list, row_list = cpu.tolist(), ts.tolist(), which.tolist(), row.tolist()
    seen: set[int] = set()
    while start < n:
        this_cpu = cpu_list[start]
        end = start
        limit = min(n, start + BUNDLE_EVENTS)
        while end < limit and cpu_list[end] == this_cpu:
            end += 1
        packet = pb.TracePacket(trusted_packet_sequence_id=_FTRACE_SEQUENCE)
        bundle = packet.ftrace_events
        bundle.cpu = this_cpu
        if clock is not None:
            bundle.ftrace_clock = clock
            if clock in (pb.FTRACE_CLOCK_LOCAL, pb.FTRACE_CLOCK_GLOBAL):
                # the snapshot Perfetto needs for per-CPU clocks: the same instant on both
                bundle.ftrace_timestamp = ts_list[start]
                bundle.boot_timestamp = ts_list[start]
        if this_cpu in lost_cpus and this_cpu not in seen:
            bundle.lost_events = True
        seen.add(this_cpu)
        events = bundle.event
        for i in range(start, end):
            k, r = which_list[i], row_list[i]
            plan = plans[k]
            event = events.add()
            event.timestamp = ts_list[i]
            pid = pids[k][r]
            if pid is not None:
                event.pid = pid
            if plan.message is not None:
                msg = getattr(event, plan.message)
                msg.SetInParent()
                for col in plan.columns:
                    value = col.values[r]
                    if value is not None:
                        setattr(msg, col.proto, value)
            else:
                generic = event.generic
                generic.event_name = plan.name
                for col in plan.columns:
                    value = col.values[r]
                    if value is not None:
                        kind, _, fname = col.proto.partition(":")
                        f = generic.field.add()
                        f.name = fname
                        setattr(f, kind, value)
        writer.write(packet)
        per_cpu[this_cpu] = per_cpu.get(this_cpu, 0) + (end - start)
        start = end
    return per_cpu


def _write_tracks(writer: _PacketWriter, pb, tracks: Sequence[Track]) -> dict[str, int]:
    """Track descriptors then their events (one sequence, no interning)."""
    import numpy as np  # deferred: see the note under __all__

    first = True

    def packet(**kwargs):
        nonlocal first
        p = pb.TracePacket(trusted_packet_sequence_id=_TRACK_SEQUENCE, **kwargs)
        if first:
            p.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            p.first_packet_on_sequence = True
            first = False
        return p

    uuids: dict[tuple[str | None, str], int] = {}

    def uuid(group: str | None, name: str) -> int:
        return uuids.setdefault((group, name), 0x1E5A0000 + len(uuids) + 1)

    written: dict[str, int] = {}
    for track in tracks:
        if track.kind not in ("slice", "instant", "counter"):
            raise UserError(f"Perfetto track {track.name!r}: kind must be slice, instant or counter, "
                            f"not {track.kind!r}")
        if track.group is not None and (None, track.group) not in uuids:
            writer.write(packet(track_descriptor=pb.TrackDescriptor(uuid=uuid(None, track.group),
                                                                    name=track.group)))
        descriptor = pb.TrackDescriptor(uuid=uuid(track.group, track.name), name=track.name)
        if track.group is not None:
            descriptor.parent_uuid = uuid(None, track.group)
        if track.kind == "counter":
            descriptor.counter.SetInParent()
            if track.unit:
                descriptor.counter.unit_name = track.unit
        writer.write(packet(track_descriptor=descriptor))
    for track in tracks:
        track_uuid = uuid(track.group, track.name)
        rows = track.rows.sort_values("ts", kind="stable")
        ts = rows["ts"].to_numpy(np.int64).tolist()
        if track.kind == "counter":
            for t, value in zip(ts, rows["value"].to_numpy(float).tolist()):
                writer.write(packet(timestamp=t, track_event=pb.TrackEvent(
                    type=pb.TrackEvent.TYPE_COUNTER, track_uuid=track_uuid,
                    double_counter_value=value)))
        elif track.kind == "instant":
            for t, label in zip(ts, rows["name"].astype(str).tolist()):
                writer.write(packet(timestamp=t, track_event=pb.TrackEvent(
                    type=pb.TrackEvent.TYPE_INSTANT, track_uuid=track_uuid, name=label)))
        else:
            # slices of one track must nest: a slice starting before the previous
            # one ended is cut at that start
            durs = rows["dur"].to_numpy(np.int64).tolist()
            labels = rows["name"].astype(str).tolist()
            for k, (t, dur, label) in enumerate(zip(ts, durs, labels)):
                end = t + max(dur, 0)
                if k + 1 < len(ts):
                    end = min(end, ts[k + 1])
                writer.write(packet(timestamp=t, track_event=pb.TrackEvent(
                    type=pb.TrackEvent.TYPE_SLICE_BEGIN, track_uuid=track_uuid, name=label)))
                writer.write(packet(timestamp=end, track_event=pb.TrackEvent(
                    type=pb.TrackEvent.TYPE_SLICE_END, track_uuid=track_uuid)))
        written[track.name if track.group is None else f"{track.group}/{track.name}"] = len(ts)
    return written


def write_pftrace(tables: "TraceTables", out: str | os.PathLike, tracks: Iterable[Track] = ()) -> dict:
    """Write ``tables`` (every event of a trace) and ``tracks`` to ``out`` as a Perfetto trace.

    :returns: ``{"events": {name: rows}, "typed": [events as Perfetto's own
        messages], "generic": [events as generic events], "dropped": {event:
        [columns Perfetto's message lacks]}, "cpus": n, "clock": str,
        "threads": n, "tracks": {track: rows}, "packets": n}``
    """
    pb = _pb()
    out = os.fspath(out)
    meta = tables.meta
    names = [n for n in tables.events if tables[n].num_rows]
    dropped: dict[str, list[str]] = {}
    plans = []
    for name in names:
        message = ftrace_message(name)
        plans.append(_typed_plan(name, tables[name], message, dropped) if message is not None
                     else _generic_plan(name, tables[name]))
    cpus = int(meta.get("cpus") or 0)
    max_cpu = max((int(max(tables[n].column("__cpu").to_pylist(), default=-1)) for n in names),
                  default=-1)
    cpus = max(cpus, max_cpu + 1)
    clock = _ftrace_clock(pb, meta.get("clock"))
    lost = meta.get("lost_events") or {}
    lost_cpus = {int(c) for c, k in (lost.get("per_cpu") or {}).items() if k}
    first_ts = int(meta.get("first_timestamp_ns") or 0)
    tracks = list(tracks)
    threads = _thread_names(tables, names)
    tmp = f"{out}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            writer = _PacketWriter(f)
            info = pb.TracePacket(trusted_packet_sequence_id=_FTRACE_SEQUENCE, timestamp=first_ts)
            info.system_info.num_cpus = cpus
            writer.write(info)
            cpu_info = pb.TracePacket(trusted_packet_sequence_id=_FTRACE_SEQUENCE, timestamp=first_ts)
            for k in range(cpus):
                cpu_info.cpu_info.cpus.add(processor=f"cpu{k}")
            writer.write(cpu_info)
            if clock == getattr(pb, "FTRACE_CLOCK_MONO_RAW"):
                # the findings' track events are in boot time: say it equals the trace's clock
                snap = pb.TracePacket(trusted_packet_sequence_id=_FTRACE_SEQUENCE, timestamp=first_ts)
                for clock_id in (pb.BUILTIN_CLOCK_BOOTTIME, pb.BUILTIN_CLOCK_MONOTONIC_RAW):
                    snap.clock_snapshot.clocks.add(clock_id=clock_id, timestamp=first_ts)
                writer.write(snap)
            tree = pb.TracePacket(trusted_packet_sequence_id=_FTRACE_SEQUENCE, timestamp=first_ts)
            for pid, comm in threads.items():
                tree.process_tree.threads.add(tid=pid, name=comm)
            writer.write(tree)
            per_cpu = _write_events(writer, pb, tables, plans, names, clock, lost_cpus)
            written = _write_tracks(writer, pb, tracks)
        os.replace(tmp, out)
    except OSError as exc:
        raise UserError(f"{out}: cannot write the Perfetto trace ({exc.strerror})") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return {
        "events": {n: tables[n].num_rows for n in names},
        "typed": [p.name for p in plans if p.message is not None],
        "generic": [p.name for p in plans if p.message is None],
        "dropped": dropped,
        "cpus": cpus,
        "events_per_cpu": dict(sorted(per_cpu.items())),
        "clock": meta.get("clock"),
        "threads": len(threads),
        "tracks": written,
        "packets": writer.packets,
    }
