"""Decode a .pftrace with Perfetto's published protos, independently of the writer.

Used by tests/test_trace_perfetto.py and the smoke studies: what a Perfetto
reader would find in the file (events per ftrace event name, per-CPU order,
CPUs, threads, finding tracks), computed from the protos alone.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

__all__ = ["Decoded", "decode"]


@dataclass
class Decoded:
    events: Counter = field(default_factory=Counter)          # event name -> count
    per_cpu_ts: dict = field(default_factory=lambda: defaultdict(list))
    num_cpus: int | None = None
    cpu_info: int = 0
    threads: dict = field(default_factory=dict)               # tid -> name
    clocks: set = field(default_factory=set)
    tracks: dict = field(default_factory=dict)                # uuid -> (name, parent uuid, is counter)
    # keyed by "group/track" (or "track" without a group):
    track_events: Counter = field(default_factory=Counter)    # (track, type name) -> count
    counter_values: dict = field(default_factory=lambda: defaultdict(list))  # track -> (ts, value)
    slices: dict = field(default_factory=lambda: defaultdict(list))          # track -> (begin, end)

    def monotonic_per_cpu(self) -> bool:
        return all(all(a <= b for a, b in zip(ts, ts[1:])) for ts in self.per_cpu_ts.values())

    def track_names(self, group: str) -> list[str]:
        """Names of the tracks under the parent track named ``group``."""
        parents = {u for u, (name, _, _) in self.tracks.items() if name == group}
        return sorted(name for name, parent, _ in self.tracks.values() if parent in parents)


def decode(path: Path) -> Decoded:
    trace = pb.Trace.FromString(Path(path).read_bytes())
    out = Decoded()
    names = {}
    open_slices: dict = {}
    for packet in trace.packet:
        kind = packet.WhichOneof("data")
        if kind == "ftrace_events":
            bundle = packet.ftrace_events
            if bundle.HasField("ftrace_clock"):
                out.clocks.add(pb.FtraceClock.Name(bundle.ftrace_clock))
            for event in bundle.event:
                which = event.WhichOneof("event")
                out.events[event.generic.event_name if which == "generic" else which] += 1
                out.per_cpu_ts[bundle.cpu].append(event.timestamp)
        elif kind == "system_info":
            out.num_cpus = packet.system_info.num_cpus
        elif kind == "cpu_info":
            out.cpu_info = len(packet.cpu_info.cpus)
        elif kind == "process_tree":
            out.threads.update({t.tid: t.name for t in packet.process_tree.threads})
        elif kind == "track_descriptor":
            d = packet.track_descriptor
            out.tracks[d.uuid] = (d.name, d.parent_uuid if d.HasField("parent_uuid") else None,
                                  d.HasField("counter"))
            parent = names.get(d.parent_uuid) if d.HasField("parent_uuid") else None
            names[d.uuid] = f"{parent}/{d.name}" if parent else d.name
        elif kind == "track_event":
            e = packet.track_event
            name = names[e.track_uuid]
            out.track_events[(name, pb.TrackEvent.Type.Name(e.type))] += 1
            if e.type == pb.TrackEvent.TYPE_COUNTER:
                out.counter_values[name].append((packet.timestamp, e.double_counter_value))
            elif e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
                open_slices[e.track_uuid] = packet.timestamp
            elif e.type == pb.TrackEvent.TYPE_SLICE_END:
                out.slices[name].append((open_slices.pop(e.track_uuid), packet.timestamp))
    return out
