"""schbench: the scheduler wake-up latency benchmark (github masoncl/schbench) of RFC 004.

Message threads hand requests to worker threads and measure how long a woken
worker waits for a CPU (wake-up latency) and how long a request takes end to
end (request latency); schbench prints both as percentiles, plus requests per
second. Debian does not package it: build and install it with
``lisa-ext campaign tool install schbench --src DIR --target CONF``.

Percentiles come from the ``-j`` JSON file (``wakeup_latency_pct50.0`` ...);
the average RPS is only in the text report (stderr), as is everything for a
schbench too old to have ``-j`` - :func:`parse_schbench_text` reads that.
"""

from __future__ import annotations

import json
import re

from lisa_ext.schema import DURATION_S, THREADS, TIMEOUT_S, Field, Number
from lisa_ext.campaign.store.records import Metric
from lisa_ext.campaign.workloads.base import RunContext, Workload, WorkloadError
from lisa_ext.campaign.workloads.command import run_logged

__all__ = ["Schbench", "parse_schbench", "parse_schbench_text"]

#: schbench section heading -> metric prefix, unit, lower_is_better
_SECTIONS = {"Wakeup Latencies": ("wakeup_lat", "us", True),
             "Request Latencies": ("request_lat", "us", True),
             "RPS": ("rps", "requests/s", False)}
#: JSON key prefix -> text section heading
_JSON_PREFIX = {"wakeup_latency": "Wakeup Latencies", "request_latency": "Request Latencies", "rps": "RPS"}
_PCT_LINE = re.compile(r"^\s*\*?\s*(\d+(?:\.\d+)?)th:\s+(\d+)")
_MINMAX_LINE = re.compile(r"^\s*min=(\d+),\s*max=(\d+)")


def _pct_name(pct: str) -> str:
    # "50.0" -> "p50", "99.9" -> "p99_9"
    whole, _, frac = pct.partition(".")
    return f"p{whole}" + (f"_{frac}" if frac.strip("0") else "")


def parse_schbench_text(text: str) -> dict[str, dict[str, float]]:
    """{section heading: {"p50": .., "min": .., "max": ..}} from the last report in ``text``.

    schbench prints a report every ``-i`` seconds and a final one; later reports
    overwrite earlier ones. ``average rps`` lands under ``RPS`` as ``avg``.
    """
    result: dict[str, dict[str, float]] = {}
    section = None
    for line in text.splitlines():
        heading = next((h for h in _SECTIONS if line.startswith(h + " percentiles")), None)
        if heading:
            section = heading
            result[section] = {}
            continue
        m = _PCT_LINE.match(line)
        if m and section:
            result[section][_pct_name(m.group(1))] = float(m.group(2))
            continue
        m = _MINMAX_LINE.match(line)
        if m and section:
            result[section]["min"], result[section]["max"] = float(m.group(1)), float(m.group(2))
            continue
        m = re.match(r"^average rps:\s*([0-9.]+)", line)
        if m:
            result.setdefault("RPS", {})["avg"] = float(m.group(1))
        section = section if line.startswith("\t") else None
    return result


def _parse_json(data: dict) -> dict[str, dict[str, float]]:
    values: dict[str, dict[str, float]] = {}
    for key, value in (data.get("int") or {}).items():
        for prefix, heading in _JSON_PREFIX.items():
            if key.startswith(prefix + "_"):
                stat = key[len(prefix) + 1:]
                stat = _pct_name(stat[3:]) if stat.startswith("pct") else stat
                values.setdefault(heading, {})[stat] = float(value)
    return values


def parse_schbench(text: str, json_data: dict | None = None) -> list[Metric]:
    """Metrics of one schbench run: JSON percentiles when given, the text report otherwise."""
    text_values = parse_schbench_text(text)
    values = _parse_json(json_data) if json_data is not None else text_values
    if "avg" in text_values.get("RPS", {}):
        values.setdefault("RPS", {})["avg"] = text_values["RPS"]["avg"]
    metrics = []
    for heading, (prefix, unit, lower) in _SECTIONS.items():
        for stat, value in (values.get(heading) or {}).items():
            metrics.append(Metric(f"{prefix}_{stat}", value, unit, lower))
    if not any(m.name.startswith("wakeup_lat_") for m in metrics):
        raise WorkloadError("schbench output has no wake-up latency report")
    return metrics


class Schbench(Workload):
    KIND = "schbench"
    TOOLS = ("schbench",)
    SCHEMA = {
        "runtime-s": Field((int,), "seconds to run (-r)", True, bounds=DURATION_S),
        "message-threads": Field((int,), "message threads (-m, default 1)", bounds=THREADS),
        "threads": Field((int,), "worker threads per message thread (-t, default: number of CPUs)",
                         bounds=THREADS),
        "rps": Field((int,), "requests per second mode (-R)", bounds=(1, 10_000_000)),
        "warmup-s": Field((int,), "seconds of warm-up before the stats are reset (-w)",
                          bounds=(0, DURATION_S[1])),
        "operations": Field((int,), "think-time operations per request (-n, default 5)",
                            bounds=(0, 1_000_000)),
        "cache-footprint-kb": Field((int,), "cache footprint in KiB (-F, default 256)", bounds=(1, 1 << 20)),
        "timeout-s": Field(Number, "kill schbench after this many seconds (default: 3 x runtime + 60)",
                           bounds=TIMEOUT_S),
    }
    _FLAGS = {"runtime-s": "-r", "message-threads": "-m", "threads": "-t", "rps": "-R",
              "warmup-s": "-w", "operations": "-n", "cache-footprint-kb": "-F"}

    def command(self) -> str:
        args = [f"{flag} {int(self.options[key])}" for key, flag in self._FLAGS.items() if key in self.options]
        return "schbench " + " ".join(args) + " -j schbench.json"

    def run(self, ctx: RunContext) -> list[Metric]:
        timeout = float(self.options.get("timeout-s", 3 * self.options["runtime-s"] + 60))
        _, stderr = run_logged(ctx, self.command(), "schbench", timeout, "schbench",
                               extra_files=("schbench.json",))
        json_path = ctx.local_dir / "schbench.json"
        data = json.loads(json_path.read_text()) if json_path.exists() else None
        return parse_schbench(stderr, data)
