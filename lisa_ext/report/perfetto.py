"""A run (or any trace) as a Perfetto trace, with the analyses' findings as tracks.

:func:`export_perfetto` writes what :mod:`lisa_ext.trace.perfetto` makes of the
trace's events plus these tracks, each from the analysis named (a finding whose
events the trace lacks is left out, with a note):

``idle misses``
    per CPU, an instant per ``cpu_idle_miss`` (``trace.ana.idle_miss.df_idle_miss_events``),
    named ``too_deep`` / ``too_shallow`` and the state;
``wake-up latency``
    per task, a slice from each wake-up to its switch-in
    (``trace.ana.wakeup_latency.df_all_wakeup_latencies``);
``iowait``
    per task, a slice per IO sleep (``trace.ana.iowait_boost.df_iowait_sleeps``,
    ending at the wake-up), and per CPU schedutil's IO-wait boosts
    (``df_iowait_boost_events``, Android's ``sugov_set_iowait_boost``): a counter
    of the boost when the event has a numeric one, else an instant per event;
``work items``
    per CPU, a slice per work item it executed, named by its function and the CPU
    it was queued on (``trace.ana.wq_placement.df_work_items``);
``gated idle``
    per CPU, a slice per idle period the idle-gating patch gates
    (``trace.ana.idle_gating.df_idle_periods``, ``marked``), named by its state;
``power``
    per CPU, counters of estimated power (mW) and cumulative energy (mJ), from
    ``trace.ana.energy.df_power_timeline`` with the power model the run's meter
    recorded (``meta.json`` ``energy.model``) or one given.

:func:`perfetto_link` is the small helper study pages and the explorer use: it
writes the file beside a page and returns the HTML of a link to it, with how to
open it in Perfetto.
"""

from __future__ import annotations

import base64
import html
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lisa_ext.campaign.store.reader import RunMeta
from lisa_ext.energy_model import EnergyModel, load_model, model_from_dict
from lisa_ext.errors import SpecError, UserError
from lisa_ext.report import cache
from lisa_ext.report.explore import trace_file
from lisa_ext.trace import read_trace
from lisa_ext.trace.perfetto import Track, write_pftrace

__all__ = ["PERFETTO_UI", "export_perfetto", "findings_tracks", "perfetto_link", "run_model"]

#: where the file is opened (drag and drop, or "Open trace file"); it is read in the browser
PERFETTO_UI = "https://ui.perfetto.dev"


def run_model(source: str | os.PathLike) -> EnergyModel | None:
    """The power model a run's meter recorded (``meta.json`` ``energy.model``), if any."""
    path = Path(source)
    try:
        meta = RunMeta.read(path if path.is_dir() else path.parent)
    except SpecError:
        return None
    model = (meta.get("energy") or {}).get("model")
    return model_from_dict(model, f"{meta.path} energy.model") if model else None


def _ns(seconds) -> np.ndarray:
    return np.rint(np.asarray(seconds, dtype=float) * 1e9).astype(np.int64)


def _per(df: pd.DataFrame, key: str) -> list[tuple[Any, pd.DataFrame]]:
    return [(k, g) for k, g in df.groupby(key, sort=True)] if len(df) else []


def _idle_misses(trace) -> list[Track]:
    df = trace.ana.idle_miss.df_idle_miss_events()
    return [Track(f"CPU{int(cpu)}", "instant", pd.DataFrame({
        "ts": _ns(g.index), "name": g["kind"].astype(str) + " (state " + g["state"].astype(str) + ")"}),
        group="idle misses") for cpu, g in _per(df, "cpu")]


def _wakeup_latency(trace) -> list[Track]:
    df = trace.ana.wakeup_latency.df_all_wakeup_latencies()
    tracks = []
    for pid, g in _per(df, "pid"):
        comm = str(g["comm"].iloc[-1])
        tracks.append(Track(f"{comm} {int(pid)}", "slice", pd.DataFrame({
            "ts": _ns(g.index), "dur": _ns(g["latency"]),
            "name": "wake-up -> CPU" + g["cpu"].astype(str)}), group="wake-up latency"))
    return tracks


def _iowait(trace) -> list[Track]:
    ana = trace.ana.iowait_boost
    tracks = []
    sleeps = ana.df_iowait_sleeps()
    for pid, g in _per(sleeps, "pid"):
        end = _ns(g.index)
        tracks.append(Track(f"pid {int(pid)}", "slice", pd.DataFrame({
            "ts": end - _ns(g["delay"]), "dur": _ns(g["delay"]),
            "name": "IO sleep (" + g["source"].astype(str) + ")"}), group="iowait sleeps"))
    if "sugov_set_iowait_boost" in trace.available_events:
        boost = ana.df_iowait_boost_events()
        column = next((c for c in ("iowait_boost", "boost") if c in boost.columns), None)
        for cpu, g in _per(boost, "cpu"):
            if column is not None:
                tracks.append(Track(f"CPU{int(cpu)}", "counter", pd.DataFrame({
                    "ts": _ns(g.index), "value": pd.to_numeric(g[column]).to_numpy(float)}),
                    group="iowait boost"))
                continue
            # kernels whose event is only text ("doing iow boost"): one instant per event
            text = g.drop(columns="cpu").astype(str).agg(" ".join, axis=1)
            tracks.append(Track(f"CPU{int(cpu)}", "instant", pd.DataFrame({
                "ts": _ns(g.index), "name": text.to_numpy()}), group="iowait boost"))
    return tracks


def _work_items(trace) -> list[Track]:
    df = trace.ana.wq_placement.df_work_items()
    df = df[df["duration"].notna()]
    return [Track(f"CPU{int(cpu)}", "slice", pd.DataFrame({
        "ts": _ns(g.index.to_numpy(float) + g["latency"].to_numpy(float)), "dur": _ns(g["duration"]),
        "name": g["function"].astype(str) + " (queued on CPU" + g["queue_cpu"].astype(str) + ")"}),
        group="work items") for cpu, g in _per(df, "exec_cpu")]


def _gated_idle(trace, marked: str | None) -> list[Track]:
    df = trace.ana.idle_gating.df_idle_periods(marked)
    df = df[df["marked"] & df["duration"].notna()]
    return [Track(f"CPU{int(cpu)}", "slice", pd.DataFrame({
        "ts": _ns(g.index), "dur": _ns(g["duration"]),
        "name": "gated: state " + g["state"].astype(str) + " after " + g["marked_comm"].astype(str)}),
        group="gated idle") for cpu, g in _per(df, "cpu")]


def _power(trace, model: EnergyModel) -> list[Track]:
    df = trace.ana.energy.df_power_timeline(model)
    tracks = []
    for cpu, g in _per(df, "cpu"):
        start = _ns(g.index)
        end = start[-1:] + _ns(g["time_s"].iloc[-1:])
        tracks.append(Track(f"CPU{int(cpu)} power", "counter", pd.DataFrame({
            "ts": start, "value": g["power_mw"].to_numpy(float)}), group="power (estimate)",
            unit="mW"))
        energy = np.cumsum(g["energy_mj"].to_numpy(float))
        tracks.append(Track(f"CPU{int(cpu)} energy", "counter", pd.DataFrame({
            "ts": np.concatenate([start, end]), "value": np.concatenate([[0.0], energy])}),
            group="power (estimate)", unit="mJ"))
    return tracks


def findings_tracks(path: str | os.PathLike, model: EnergyModel | None = None,
                    marked: str | None = None) -> tuple[list[Track], list[str]]:
    """The findings of the analyses on the trace at ``path`` as Perfetto tracks,
    and one note per finding left out (and why)."""
    # deferred: the analyses import LISA (seconds); an export without findings never needs it
    from lisa_ext.report.traces import load_trace

    trace = load_trace(path)
    found: list[Track] = []
    notes: list[str] = []
    kinds = [("idle misses", lambda: _idle_misses(trace)),
             ("wake-up latency", lambda: _wakeup_latency(trace)),
             ("iowait", lambda: _iowait(trace)),
             ("work items", lambda: _work_items(trace)),
             ("gated idle", lambda: _gated_idle(trace, marked))]
    if model is not None:
        kinds.append(("power", lambda: _power(trace, model)))
    else:
        notes.append("power: left out, no power model (the run recorded none; pass --model)")
    for name, make in kinds:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tracks = make()
        except UserError as exc:
            notes.append(f"{name}: left out, {exc}")
            continue
        except Exception as exc:  # LISA's MissingTraceEventError and friends
            notes.append(f"{name}: left out, {type(exc).__name__}: {str(exc).split('. Available')[0]}")
            continue
        if not tracks:
            notes.append(f"{name}: nothing found")
        found.extend(tracks)
    return found, notes


def export_perfetto(source: str | os.PathLike, out: str | os.PathLike, *, findings: bool = True,
                    model: EnergyModel | str | os.PathLike | None = None,
                    marked: str | None = None) -> dict:
    """Write the trace of ``source`` (trace file or run directory) to ``out`` as a
    Perfetto trace, with the findings of the analyses unless ``findings`` is false.

    :param model: power model for the power/energy counters (an
        :class:`~lisa_ext.energy_model.EnergyModel` or a model file); default
        the one the run recorded.
    :param marked: comm prefixes of latency-sensitive tasks for ``work items``
    per CPU, a slice per work item it executed, named by its function and the CPU
    it was queued on (``trace.ana.wq_placement.df_work_items``);
``gated idle``
        (default: the idle-gating analysis's).
    :returns: :func:`lisa_ext.trace.perfetto.write_pftrace`'s summary plus ``notes``.
    :raises UserError: ``out`` exists and is not a Perfetto trace (it is never overwritten).
    """
    _check_output(Path(out))
    path = trace_file(source)
    if isinstance(model, (str, os.PathLike)):
        model = load_model(model)
    elif model is None:
        model = run_model(source)
    tracks, notes = findings_tracks(path, model, marked) if findings else ([], [])
    summary = write_pftrace(read_trace(path), out, tracks)
    summary["notes"] = notes
    return summary


#: the first packet of a Perfetto trace lisa-ext writes is a few dozen bytes: a longer one is not ours
_FIRST_PACKET_MAX = 4096


def _is_pftrace(path: Path) -> bool:
    """Whether ``path`` starts as :func:`~lisa_ext.trace.perfetto.write_pftrace` starts a file:
    a ``Trace.packet`` record holding the system's description."""
    # deferred: the protobuf classes (~0.2 s) load only when a file is written
    from google.protobuf.message import DecodeError
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2

    with open(path, "rb") as f:
        head = f.read(1 + 10)
        if len(head) < 2 or head[0] != 0x0A:  # field 1 (packet), length-delimited
            return False
        size, shift, at = 0, 0, 1
        while at < len(head):
            size |= (head[at] & 0x7F) << shift
            shift += 7
            at += 1
            if not head[at - 1] & 0x80:
                break
        else:
            return False
        if size > _FIRST_PACKET_MAX:
            return False
        f.seek(at)
        data = f.read(size)
    try:
        packet = perfetto_trace_pb2.TracePacket.FromString(data)
    except DecodeError:
        return False
    return len(data) == size and packet.HasField("system_info")


def _check_output(out: Path) -> None:
    """Refuse to write over anything but an earlier Perfetto trace."""
    if not out.exists():
        return
    if out.is_dir():
        raise UserError(f"{out}: is a directory; name the .pftrace file to write")
    if not _is_pftrace(out):
        raise UserError(f"{out}: exists and is not a Perfetto trace; it is not overwritten: choose another -o")


def perfetto_link(source: str | os.PathLike, out_dir: str | os.PathLike, name: str | None = None,
                  *, embed_below: int = 4 << 20, **options: Any) -> str:
    """Export ``source`` (a run directory or trace) to ``out_dir/<name>.pftrace``
    and return the HTML of a link to it saying how to open it in Perfetto, for a
    study page or beside the explorer. A file under ``embed_below`` bytes is
    carried by the link itself (a ``data:`` URI), so an exported page keeps it
    wherever it is copied; a larger one is linked by name, beside the page.
    ``options`` go to :func:`export_perfetto`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    trace = trace_file(source)
    target = out_dir / f"{name or trace.stem}.pftrace"
    model = options.get("model", run_model(source))
    # kept in the report cache like the explorer's page: a notebook re-render copies it
    # instead of loading the trace into LISA again
    key = cache.digest(cache.trace_key(trace), cache.code_digest([Path(__file__)]),
                       model.to_dict() if isinstance(model, EnergyModel) else
                       None if model is None else os.fspath(model),
                       sorted((k, str(v)) for k, v in options.items() if k != "model"))
    entry = cache.cache_root() / "perfetto" / f"{key}.pftrace"
    if not entry.is_file():
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = entry.with_name(f".{entry.name}.{os.getpid()}")
        try:
            export_perfetto(source, tmp, **{**options, "model": model})
            os.replace(tmp, entry)
        finally:
            tmp.unlink(missing_ok=True)
    shutil.copyfile(entry, target)
    size = target.stat().st_size
    href = html.escape(target.name)
    if size < embed_below:
        href = "data:application/octet-stream;base64," + base64.b64encode(target.read_bytes()).decode()
    return (f'<p>Open this run in Perfetto: <a href="{href}" download="{html.escape(target.name)}">'
            f'{html.escape(target.name)}</a> ({size / 1e6:.1f} MB), then drop the file on '
            f'<a href="{PERFETTO_UI}">{PERFETTO_UI}</a> (it is read in your browser, not uploaded) or '
            f'run <code>trace_processor {html.escape(target.name)}</code>.</p>')
