"""Energy meters read around each campaign run (campaign option ``energy:``).

* ``hwmon``: the Linux hwmon energy counters (Documentation/hwmon/sysfs-interface.rst:
  ``/sys/class/hwmon/hwmonN/energyK_input``, microjoules, monotonic, with an
  optional ``energyK_label``), as Juno-class boards expose their energy sensors
  and as the virtual board's emulation module does
  (kernels/platform-emu/lisa_emu_cpufreq.c, labels ``pd<first CPU>``).
* ``pixel6``: the Pixel 6 on-device power monitor (ODPM), exposed by its IIO
  driver as ``/sys/bus/iio/devices/iio:deviceN/energy_value``: a ``t=<ms>``
  line then one ``CH<k>(T=<ms>)[<rail>], <energy>`` line per rail, energy in
  microwatt-seconds (= microjoules). Implemented from that format, NOT tested
  here (no phone).
* ``none``: no meter.

LISA's own meters (lisa.energy_meter.HWMon) need devlib's hwmon module and
scan every sensor at start; one shell command per reading is all a
before/after measurement needs, so the readers here are small and share one
shape. Each reading is one command on the target; a run's figures are the
differences between the reading just before and just after the workload.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from dataclasses import dataclass
from typing import Any, Iterator

from lisa_ext.campaign.store.records import Metric
from lisa_ext.energy_model import model_from_target
from lisa_ext.errors import UserError

__all__ = ["METER_KINDS", "METER_MARKERS", "Meter", "metered", "open_meter", "parse_clock", "parse_hwmon",
           "parse_pixel6", "target_seconds"]

METER_KINDS = ("none", "hwmon", "pixel6")
#: trace markers written right after the reading before the workload and right before the one
#: after it, when the run is traced: the meter's window in the trace's own clock
METER_MARKERS = ("lisa-ext-meter-start", "lisa-ext-meter-end")

_HWMON_CMD = ("for f in /sys/class/hwmon/hwmon*/energy*_input; do [ -r \"$f\" ] || continue; "
              "l=\"${f%_input}_label\"; printf '%s %s %s\\n' \"$f\" \"$(cat \"$f\")\" "
              "\"$( [ -r \"$l\" ] && cat \"$l\" )\"; done")
_PIXEL6_CMD = ("for f in /sys/bus/iio/devices/iio:device*/energy_value; do [ -r \"$f\" ] || continue; "
               "echo \"== $f\"; cat \"$f\"; done")
_PIXEL6_LINE = re.compile(r"^CH(\d+)\(T=(\d+)\)\[([^\]]+)\],\s*(\d+)\s*$")
#: read with every reading, in the same command: the target's own clock, as ``date`` gives it (ns,
#: CLOCK_REALTIME) and as its ``/proc/uptime`` (10 ms): a run's power is its energy over the
#: target's time, which on the virtual board's clock is not the host's
_CLOCK_CMD = "echo \"lisa-ext-clock date=$(date +%s.%N 2>/dev/null) uptime=$(cut -d' ' -f1 /proc/uptime 2>/dev/null)\""
#: how far (s) the two clocks' durations may differ before ``date``'s is taken for a jump
_CLOCK_JUMP_S = 0.05


def parse_hwmon(text: str) -> dict[str, int]:
    """``path value label`` lines -> {channel: uJ}; a channel is its label, else its hwmon path."""
    channels = {}
    for line in text.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) < 2 or not parts[1].isdigit():
            continue
        path, value = parts[0], int(parts[1])
        name = parts[2].strip() if len(parts) == 3 and parts[2].strip() else path.split("/sys/class/hwmon/")[-1]
        channels[name] = value
    return channels


def parse_pixel6(text: str) -> dict[str, int]:
    """The ``energy_value`` files -> {rail: uJ} (microwatt-seconds)."""
    channels = {}
    for line in text.splitlines():
        m = _PIXEL6_LINE.match(line.strip())
        if m:
            channels[m[3]] = int(m[4])
    return channels


@dataclass
class Meter:
    """A meter on one target: kind, how to read it, the channels it found at pre-flight."""

    kind: str
    target: Any
    command: str
    channels: tuple[str, ...]
    target_name: str = "the target"

    def read(self, *, then: str = "", first: str = "") -> dict[str, int]:
        """Cumulative energy per channel, microjoules; ``first`` / ``then``: shell commands run
        just before / after the reading, in the same command (a trace marker)."""
        return self.read_timed(then=then, first=first)[0]

    def read_timed(self, *, then: str = "", first: str = "") -> tuple[dict[str, int], tuple[float, ...]]:
        """:meth:`read` and the target's clocks at the reading (:func:`parse_clock`)."""
        command = "; ".join(c for c in (first, self.command, _CLOCK_CMD, then) if c)
        text = self.target.execute(command, as_root=True, check_exit_code=False)
        return (parse_hwmon if self.kind == "hwmon" else parse_pixel6)(text), parse_clock(text)


def parse_clock(text: str) -> tuple[float, ...]:
    """The ``lisa-ext-clock`` line of a reading: (``date`` seconds, uptime seconds), either NaN
    when the target could not give it (a ``date`` without ``%N``)."""
    for line in text.splitlines():
        parts = line.split()
        if parts[:1] == ["lisa-ext-clock"]:
            fields = dict(p.partition("=")[::2] for p in parts[1:])
            return _seconds(fields.get("date", "")), _seconds(fields.get("uptime", ""))
    return (math.nan, math.nan)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        return math.nan
    return value if math.isfinite(value) and value >= 0 else math.nan


def target_seconds(before: tuple[float, ...], after: tuple[float, ...]) -> tuple[float, str] | None:
    """The target's time between two readings and the clock it came from: ``date`` (ns), unless
    it jumped against the uptime (a clock set during the run), else the uptime; None when
    neither clock was read both times."""
    by_date, by_uptime = after[0] - before[0], after[1] - before[1]
    if by_date > 0 and not (by_uptime > 0 and abs(by_date - by_uptime) > _CLOCK_JUMP_S):
        return by_date, "the target's date (ns)"
    if by_uptime > 0:
        return by_uptime, "the target's /proc/uptime (10 ms)"
    return None


def open_meter(target: Any, kind: str, target_name: str = "the target") -> Meter | None:
    """The meter of ``kind`` on ``target``, read once: a pre-flight check that
    names the target and what is missing when it cannot be read."""
    if kind == "none":
        return None
    if kind not in METER_KINDS:
        raise UserError(f"energy: {kind!r} is not a meter kind; allowed: {', '.join(METER_KINDS)}")
    command = _HWMON_CMD if kind == "hwmon" else _PIXEL6_CMD
    meter = Meter(kind, target, command, (), target_name)
    channels = meter.read()
    if not channels:
        where = ("no readable /sys/class/hwmon/hwmon*/energy*_input (a kernel with CONFIG_HWMON "
                 "and an energy sensor driver; on the virtual board the lisa_emu_cpufreq module)"
                 if kind == "hwmon" else
                 "no readable /sys/bus/iio/devices/iio:device*/energy_value (Pixel 6 ODPM driver)")
        raise UserError(f"energy meter {kind} cannot be read on {target_name}: {where}")
    meter.channels = tuple(sorted(channels))
    return meter


def _energy_model(target: Any, target_name: str) -> dict | None:
    """The target's Energy Model, so that each run's trace can be priced as the meter was."""
    try:
        return model_from_target(target, name=target_name).to_dict()
    except UserError:
        return None  # no Energy Model on this target (most real boards): the meter alone


def _mark(marker_file: str | None, text: str) -> str:
    return f"echo {text} > {marker_file}" if marker_file else ""


@contextlib.contextmanager
def metered(meter: Meter | None, meta: dict, marker_file: str | None = None) -> Iterator[list[Metric]]:
    """Read ``meter`` around the block; on success the yielded list receives the
    metrics (``energy_<channel>_j``, ``energy_j``, ``power_mw``) and
    ``meta["energy"]`` the meter kind, channels and sampling, and the target's
    Energy Model when it has one (to price the run's trace as the meter did).
    ``marker_file``: the trace_marker of the run's ftrace instance (a path without
    shell metacharacters), which then receives :data:`METER_MARKERS` next to the two
    readings (``meta["energy"]["trace_markers"]``)."""
    metrics: list[Metric] = []
    if meter is None:
        yield metrics
        return
    # read per run: a kernel variant may bring other tables than the previous run's
    model = _energy_model(meter.target, meter.target_name)
    (before, clock0), t0 = meter.read_timed(then=_mark(marker_file, METER_MARKERS[0])), time.monotonic()
    yield metrics
    (after, clock1), t1 = meter.read_timed(first=_mark(marker_file, METER_MARKERS[1])), time.monotonic()
    # the energy was spent in the target's time: on the virtual board's own clock a busy guest lives
    # 3-25x less than the host between the two reads, so the host's seconds would divide it wrongly
    host_duration = t1 - t0
    duration, clock = target_seconds(clock0, clock1) or (host_duration, "the host's monotonic clock "
                                                          "(the target's could not be read)")
    channels = {}
    for name in meter.channels:
        if name not in before or name not in after:
            raise UserError(f"energy meter {meter.kind}: channel {name} disappeared during the run")
        channels[name] = (after[name] - before[name]) / 1e6
    total = sum(channels.values())
    power_mw = 1000.0 * total / duration if duration > 0 else float("nan")
    for name, joules in channels.items():
        metrics.append(Metric(f"energy_{re.sub(r'[^A-Za-z0-9_]+', '_', name)}_j", joules, "J", True))
    metrics += [Metric("energy_j", total, "J", True), Metric("power_mw", power_mw, "mW", True)]
    meta["energy"] = {
        "meter": meter.kind,
        "channels": {name: {"energy_j": j, "before_uj": before[name], "after_uj": after[name]}
                     for name, j in channels.items()},
        "total_energy_j": total,
        "avg_power_mw": power_mw,
        "duration_s": round(duration, 6),
        "host_duration_s": round(host_duration, 6),
        "sampling": "cumulative counters read once just before and once just after the workload; "
                    f"the time between the two reads by {clock}",
    }
    if marker_file:
        meta["energy"]["trace_markers"] = list(METER_MARKERS)
    if model is not None:
        meta["energy"]["model"] = model
