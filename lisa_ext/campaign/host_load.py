"""The host's load during each run, and the runs it may have disturbed.

The virtual board is a QEMU process on this host. On the host's clock its guest
time is the host's: when other processes keep its TCG thread from running, timer
interrupts come late and wake-up latencies grow. On the virtual clock guest time
only advances with the instructions the guest runs, so host load slows the run
down in wall time but cannot change what the guest measures.

Around each run's workload the runner records under ``meta.json``'s ``host_load``
(:func:`measured`): the host's 1-minute load average at start and end, its cores,
the host cores the target itself takes (``board_share``: the board's single TCG
thread is 1; ``null`` for a target whose time is not this host's), the host's
wall seconds and the target's own seconds (its ``/proc/uptime``) and their ratio
``guest_per_host``, and the target's clock.

A run is **disturbed** (:func:`disturbed_runs`, shown by ``campaign status`` and
the report) when it ran on a board on the host's clock and either

- the load average, less the board's own share, exceeded the cores left to others
  (``load - share > cores - share``, i.e. ``load > cores``): some runnable thread
  then waited for a core, and the board's may have been it; or
- its guest/host ratio is more than :data:`RATIO_TOLERANCE` off the campaign's
  median of such runs: on the host's clock the ratio is 1 up to the cost of the
  two reads, so a guest that lived 10 % less than the host did lost ticks (QEMU
  stopped, the host suspended or swapping).

Runs on the virtual clock are never disturbed: its ratio only says how busy the
guest was (an idle guest keeps up with the host, a busy one runs 3-25x behind).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from typing import Any, Iterator, Mapping

from lisa_ext.campaign.remote import target_uptime
from lisa_ext.campaign.store.reader import Run
from lisa_ext.errors import SpecError

__all__ = ["META_KEY", "RATIO_TOLERANCE", "disturbed_runs", "measured", "warning_line"]

META_KEY = "host_load"
#: how far (relative) a host-clock run's guest/host ratio may be from the campaign's median
RATIO_TOLERANCE = 0.10


def _rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


@contextlib.contextmanager
def measured(target: Any, meta: dict, *, clock: str, board_share: float | None) -> Iterator[None]:
    """Record in ``meta[META_KEY]`` the host's load and both clocks' seconds around the block,
    run on ``target`` (a LISA target or any object with ``execute``)."""
    load_start = os.getloadavg()[0]
    guest_start = target_uptime(target)
    host_start = time.monotonic()
    try:
        yield
    finally:
        host_s = time.monotonic() - host_start
        guest_end = target_uptime(target)
        guest_s = None if guest_start is None or guest_end is None else guest_end - guest_start
        meta[META_KEY] = {
            "clock": clock, "cores": os.cpu_count(), "board_share": board_share,
            "load_start": round(load_start, 2), "load_end": round(os.getloadavg()[0], 2),
            "host_s": _rounded(host_s), "guest_s": _rounded(guest_s),
            "guest_per_host": _rounded(guest_s / host_s if guest_s is not None and host_s > 0 else None, 4),
        }


def _record(run: Run) -> dict | None:
    """A run's host-load record when it ran on a board on the host's clock, else None."""
    try:
        record = run.meta.get(META_KEY)
    except SpecError:
        return None
    if not isinstance(record, dict) or record.get("clock") != "host":
        return None
    share = record.get("board_share")
    return record if isinstance(share, (int, float)) and not isinstance(share, bool) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def disturbed_runs(runs: list[Run]) -> dict[str, str]:
    """The runs (label -> why) host load may have disturbed, by the rules of the module docstring."""
    records = {run.label: r for run in runs if (r := _record(run)) is not None}
    ratios = [x for r in records.values() if (x := _number(r.get("guest_per_host"))) is not None and x > 0]
    median = statistics.median(ratios) if ratios else None
    disturbed = {}
    for label, record in records.items():
        reasons = []
        cores = _number(record.get("cores"))
        loads = [x for x in (_number(record.get("load_start")), _number(record.get("load_end"))) if x is not None]
        if cores and loads and max(loads) > cores:
            reasons.append(f"load {max(loads):g} on {cores:g} cores")
        ratio = _number(record.get("guest_per_host"))
        if median and ratio is not None and abs(ratio / median - 1) > RATIO_TOLERANCE:
            reasons.append(f"guest/host time {ratio:.3g}, campaign median {median:.3g}")
        if reasons:
            disturbed[label] = "; ".join(reasons)
    return disturbed


def warning_line(disturbed: Mapping[str, str]) -> str:
    """One line naming the runs host load may have disturbed."""
    runs = ", ".join(f"{label} ({why})" for label, why in sorted(disturbed.items()))
    return (f"warning: {len(disturbed)} run{'s' if len(disturbed) != 1 else ''} on the host's clock ran on a "
            f"loaded host (wake-up latencies and durations may be inflated; rerun them on a quiet host "
            f"or use board-clock: virtual): {runs}")
