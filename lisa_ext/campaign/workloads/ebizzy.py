"""ebizzy with the sleeping options of RFC 003 (github pratiksampat/sleeping-ebizzy).

ebizzy threads search and copy memory chunks ("records") as fast as they can;
the sleeping variant adds ``-a N`` (sleep after every N records) and ``-i USEC``
(for USEC microseconds), which turns it into a partially busy load: the kind of
task whose idle periods cpuidle governors predict. ebizzy prints
``N records/s`` and the process's ``real``/``user``/``sys`` seconds.

``target-util-pct`` replaces ``-a``: :func:`calibrate_sleep` measures
once per campaign, on the target and pinned as the runs will be, how many
records/s one thread makes without sleeping, derives ``-a`` for a fixed
``-i`` (``sleep-us``, default :data:`CALIBRATION_SLEEP_US`), then checks and
corrects it with measured runs. RFC 003's effect needs sleeps longer than two
of ondemand's sampling periods (drivers/cpufreq/cpufreq_governor.c
``dbs_update()``), hence a settable sleep. Every run
reports the utilisation it achieved, ``(user + sys) / real / threads``, next
to the one requested.

Debian does not package it: ``lisa-ext campaign tool install ebizzy --src DIR --target CONF``.
"""

from __future__ import annotations

import re

from lisa_ext.schema import DURATION_S, THREADS, TIMEOUT_S, Field, Number
from lisa_ext.campaign.store.records import Metric
from lisa_ext.campaign.workloads.base import RunContext, Workload, WorkloadError
from lisa_ext.campaign.workloads.command import run_logged
from lisa_ext.errors import SpecError

__all__ = ["Ebizzy", "calibrate_sleep", "parse_ebizzy"]

#: sleep length used by the calibration, in microseconds: long enough for deep idle states
CALIBRATION_SLEEP_US = 10_000
CALIBRATION_RUN_S = 3
#: measured corrections of -a at most, and the utilisation error (percentage points) that ends them
CALIBRATION_ROUNDS = 3
CALIBRATION_TOLERANCE_PCT = 2.0


def parse_ebizzy(text: str) -> dict[str, float]:
    """``records_per_s``, ``real_s``, ``user_s``, ``sys_s`` from ebizzy's report."""
    values = {}
    m = re.search(r"^(\d+) records/s", text, re.M)
    if m:
        values["records_per_s"] = float(m.group(1))
    for name in ("real", "user", "sys"):
        m = re.search(rf"^{name}\s+([0-9.]+) s", text, re.M)
        if m:
            values[f"{name}_s"] = float(m.group(1))
    missing = {"records_per_s", "real_s", "user_s", "sys_s"} - set(values)
    if missing:
        raise WorkloadError(f"ebizzy output lacks {', '.join(sorted(missing))}: {text.strip()[-200:]!r}")
    return values


def achieved_util_pct(values: dict[str, float], threads: int) -> float:
    """CPU time over wall time per thread, in percent."""
    return 100.0 * (values["user_s"] + values["sys_s"]) / values["real_s"] / threads


def ebizzy_command(threads: int, seconds: int, cpu: int | None, sleep_after: int | None,
                   sleep_us: int | None, chunk_size: int | None = None) -> str:
    args = ["ebizzy", f"-t {int(threads)}", f"-S {int(seconds)}"]
    if chunk_size:
        args.append(f"-s {int(chunk_size)}")
    if sleep_after:
        args += [f"-a {int(sleep_after)}", f"-i {int(sleep_us or 1000)}"]
    pin = f"taskset -c {int(cpu)} " if cpu is not None else ""
    return pin + " ".join(args)


def _measure(target, command: str) -> dict[str, float]:
    out = target.execute(f"{command} 2>&1", timeout=120)
    return parse_ebizzy(out)


def calibrate_sleep(target, util_pct: float, cpu: int | None = None,
                    sleep_us: int = CALIBRATION_SLEEP_US, chunk_size: int | None = None) -> dict:
    """``-a``/``-i`` giving one ebizzy thread ``util_pct`` % of a CPU on ``target``.

    Returns ``{"sleep_after": a, "sleep_us": i, "busy_records_per_s": .., "util_pct": achieved}``.
    A thread doing ``a`` records at ``R`` records/s then sleeping ``i`` us is busy
    ``(a/R) / (a/R + i/1e6)`` of the time; each measured run at that ``a`` gives the
    real CPU time per record and idle time per sleep, from which ``a`` is solved again
    (up to :data:`CALIBRATION_ROUNDS` times, until within :data:`CALIBRATION_TOLERANCE_PCT`).
    The returned ``util_pct`` is that of the last measured run.
    """
    if not 0 < util_pct < 100:
        raise ValueError(f"target utilisation must be in (0, 100), got {util_pct}")
    busy = _measure(target, ebizzy_command(1, CALIBRATION_RUN_S, cpu, None, None, chunk_size))
    rate = busy["records_per_s"]
    if rate <= 0:
        raise WorkloadError("ebizzy calibration: the busy run made no record")
    u = util_pct / 100.0
    sleep_s = sleep_us / 1e6
    sleep_after = max(1, round(u * sleep_s * rate / (1 - u)))
    for round_ in range(CALIBRATION_ROUNDS + 1):
        trial = _measure(target, ebizzy_command(1, CALIBRATION_RUN_S, cpu, sleep_after, sleep_us, chunk_size))
        got = achieved_util_pct(trial, 1)
        if (abs(got - util_pct) <= CALIBRATION_TOLERANCE_PCT or round_ == CALIBRATION_ROUNDS
                or not 0 < got < 100 or trial["records_per_s"] <= 0):
            break
        # from the trial: CPU time per record, and the idle time of each sleep as really slept
        # (timer slack, wake-up latency, waiting for the CPU); solve a*b / (a*b + idle) = u
        per_record = (got / 100.0) / trial["records_per_s"]
        idle_per_cycle = (1 - got / 100.0) * sleep_after / trial["records_per_s"]
        sleep_after = max(1, round(u * idle_per_cycle / (per_record * (1 - u))))
    return {"sleep_after": sleep_after, "sleep_us": sleep_us,
            "busy_records_per_s": rate, "util_pct": round(got, 2), "target_util_pct": util_pct}


class Ebizzy(Workload):
    KIND = "ebizzy"
    TOOLS = ("ebizzy", "taskset")
    SCHEMA = {
        "duration-s": Field((int,), "seconds to run (-S)", True, bounds=DURATION_S),
        "threads": Field((int,), "worker threads (-t, default 1)", bounds=THREADS),
        "cpu": Field((int,), "pin ebizzy to this CPU with taskset", bounds=(0, THREADS[1] - 1)),
        "sleep-after-records": Field((int,), "sleep after every N records (-a; 0 = never)",
                                     bounds=(0, 1_000_000_000)),
        "sleep-us": Field((int,), "sleep length in microseconds (-i, default 1000; with target-util-pct "
                          f"the calibrated sleep, default {CALIBRATION_SLEEP_US})", bounds=(1, 60_000_000)),
        "chunk-size": Field((int,), "bytes per memory chunk (-s, default 512 KiB): smaller chunks make "
                            "shorter records, finer sleep-after steps on a slow target", bounds=(1, 1 << 30)),
        "target-util-pct": Field(Number, "calibrate -a/-i on the target for this utilisation per thread",
                                 bounds=(0.1, 99.9)),
        "timeout-s": Field(Number, "kill ebizzy after this many seconds (default: 2 x duration + 60)",
                           bounds=TIMEOUT_S),
    }

    @classmethod
    def check_options(cls, path, prefix, options):
        if "target-util-pct" in options:
            if "sleep-after-records" in options:
                raise SpecError(path, f"{prefix}.sleep-after-records",
                                "not allowed with target-util-pct (which calibrates -a itself)")

    def _state_key(self) -> str:
        key = f"ebizzy_calibration:{self.options['target-util-pct']}:cpu{self.options.get('cpu')}"
        # the calibration of the default sleep keeps its key of old campaigns
        if "sleep-us" in self.options:
            key += f":sleep{self.options['sleep-us']}us"
        return key if "chunk-size" not in self.options else f"{key}:chunk{self.options['chunk-size']}"

    def setup_campaign(self, target, state: dict) -> None:
        if "target-util-pct" in self.options and self._state_key() not in state:
            state[self._state_key()] = calibrate_sleep(
                target, float(self.options["target-util-pct"]), self.options.get("cpu"),
                int(self.options.get("sleep-us", CALIBRATION_SLEEP_US)), self.options.get("chunk-size"))

    def command(self, state: dict) -> str:
        sleep_after, sleep_us = self.options.get("sleep-after-records"), self.options.get("sleep-us")
        if "target-util-pct" in self.options:
            calib = state[self._state_key()]
            sleep_after, sleep_us = calib["sleep_after"], calib["sleep_us"]
        return ebizzy_command(self.options.get("threads", 1), self.options["duration-s"],
                              self.options.get("cpu"), sleep_after, sleep_us, self.options.get("chunk-size"))

    def run(self, ctx: RunContext) -> list[Metric]:
        command = self.command(ctx.campaign_state)
        (ctx.local_dir / "ebizzy.cmd").write_text(command + "\n")
        timeout = float(self.options.get("timeout-s", 2 * self.options["duration-s"] + 60))
        stdout, _ = run_logged(ctx, command, "ebizzy", timeout, "ebizzy")
        values = parse_ebizzy(stdout)
        threads = int(self.options.get("threads", 1))
        metrics = [
            Metric("records_per_s", values["records_per_s"], "records/s", False),
            Metric("real_time", values["real_s"], "s", True),
            Metric("user_time", values["user_s"], "s", True),
            Metric("sys_time", values["sys_s"], "s", True),
            Metric("achieved_util_pct", achieved_util_pct(values, threads), "%", False),
        ]
        if "target-util-pct" in self.options:
            metrics.append(Metric("target_util_pct", float(self.options["target-util-pct"]), "%", False))
        return metrics
