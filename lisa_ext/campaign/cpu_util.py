"""CPU utilisation of a workload run, from ``/proc/stat`` deltas over the workload window.

The kernel's ``/proc/stat`` (fs/proc/stat.c) gives, per CPU and in total, the
time spent in user, nice, system, idle, iowait, irq, softirq, steal, guest and
guest_nice, in USER_HZ ticks since boot. Two snapshots, taken right before and
right after the workload, give the share of the window each CPU was busy:
``100 * (1 - (idle + iowait) / all)``, where ``all`` excludes guest and
guest_nice (already counted in user and nice). This is the "CPU utilisation"
column RFC 001 reports next to fio's bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lisa_ext.campaign.store.records import Metric

__all__ = ["CpuUtilWindow", "parse_proc_stat", "utilisation"]

_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def parse_proc_stat(text: str) -> dict[str, dict[str, int]]:
    """``{"cpu": {...}, "cpu0": {...}, ...}`` tick counters from ``/proc/stat`` text."""
    stats = {}
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0].startswith("cpu"):
            stats[fields[0]] = {name: int(v) for name, v in zip(_FIELDS, fields[1:])}
    return stats


def utilisation(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict]:
    """Per ``cpu*`` line: busy %, and the share of each counter, over the interval."""
    result = {}
    for cpu, end in after.items():
        start = before.get(cpu)
        if start is None:  # a CPU brought online during the window
            continue
        delta = {k: end.get(k, 0) - start.get(k, 0) for k in _FIELDS}
        total = sum(delta.values())
        if total <= 0:
            continue
        result[cpu] = {"busy_pct": round(100.0 * (1 - (delta["idle"] + delta["iowait"]) / total), 3),
                       **{f"{k}_pct": round(100.0 * v / total, 3) for k, v in delta.items()}}
    return result


@dataclass
class CpuUtilWindow:
    """``with CpuUtilWindow(target) as w: run()`` - then ``w.metrics()`` and ``w.summary``."""

    target: object
    summary: dict = field(default_factory=dict)
    _before: dict = field(default_factory=dict)

    def _read(self) -> dict[str, dict[str, int]]:
        return parse_proc_stat(self.target.execute("cat /proc/stat", check_exit_code=False))

    def __enter__(self) -> "CpuUtilWindow":
        self._before = self._read()
        return self

    def __exit__(self, *exc) -> None:
        self.summary = utilisation(self._before, self._read())

    def metrics(self) -> list[Metric]:
        """``cpu_util_total`` and ``cpu_util_cpu<N>``: busy % of the window (lower is better)."""
        out = []
        for cpu, values in sorted(self.summary.items(), key=lambda kv: (kv[0] != "cpu", len(kv[0]), kv[0])):
            name = "cpu_util_total" if cpu == "cpu" else f"cpu_util_{cpu}"
            out.append(Metric(name, values["busy_pct"], "%", True))
        return out
