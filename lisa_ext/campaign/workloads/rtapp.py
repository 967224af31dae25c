"""rt-app: periodic task sets built with LISA's ``lisa.wlgen.rta``, measured from rt-app's logs.

Each task is a :class:`lisa.wlgen.rta.PeriodicWload` (run ``duty-cycle-pct`` of
every ``period-ms``) for ``duration-s``. rt-app logs one line per activation
(``log_size: file``); per task we report the mean performance index
``slack / (c_period - c_run)`` as LISA's ``RTAEventsAnalysis.df_rtapp_stats``
defines it (1 = finished right away, 0 = just on time, < 0 = late), the mean
and 5th percentile slack, the share of activations that missed their period,
and the wake-up latency mean and 99th percentile.

rt-app needs a calibration (ns of CPU work per loop). ``calibration: auto``
measures it once per campaign, before any variant is applied, with rt-app's own
``calibration: CPU0`` and reuses the figure for every run so variants are
compared on the same amount of work. (LISA's platform-info calibration is not
used: it freezes all of userspace on the target while it runs.)
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

from lisa_ext.campaign import remote
from lisa_ext.campaign.store import Metric
from lisa_ext.campaign.workloads.base import RunContext, Workload, WorkloadError
from lisa_ext.compat import import_lisa
from lisa_ext.errors import SpecError
from lisa_ext.schema import DURATION_S, THREADS, TIMEOUT_S, Field, Number, check_mapping, in_bounds

__all__ = ["RtApp", "parse_rtapp_log", "LOG_COLUMNS"]

#: columns of rt-app's per-task log file (rt-app doc/tutorial.txt, "log_size")
LOG_COLUMNS = ("idx", "perf", "run", "period", "start", "end", "rel_st", "slack",
               "c_duration", "c_period", "wu_lat")
_TASK_NAME = re.compile(r"^[A-Za-z0-9_]{1,7}\Z")
#: sched_setattr(2) policies rt-app accepts for periodic tasks
_POLICIES = ("SCHED_OTHER", "SCHED_BATCH", "SCHED_IDLE", "SCHED_FIFO", "SCHED_RR")
_RT_POLICIES = ("SCHED_FIFO", "SCHED_RR")

_TASK_SCHEMA = {
    "duty-cycle-pct": Field(Number, "share of each period spent running", True, bounds=(0.01, 100)),
    "period-ms": Field(Number, "activation period in milliseconds", True, bounds=(0.01, 60_000)),
    "cpus": Field((list,), "CPUs the task may run on (default: all)",
                  check=lambda v: None if v and all(isinstance(c, int) and in_bounds(c, 0, THREADS[1] - 1)
                                                    for c in v)
                  else f"must be a list of CPU numbers (0 to {THREADS[1] - 1})"),
    "policy": Field((str,), "scheduling policy: " + ", ".join(_POLICIES) + " (default SCHED_OTHER)",
                    check=lambda v: None if v in _POLICIES else f"{v!r} is not one of: {', '.join(_POLICIES)}"),
    "priority": Field((int,), "nice value for SCHED_OTHER/SCHED_BATCH/SCHED_IDLE (-20..19), "
                      "real-time priority for SCHED_FIFO/SCHED_RR (1..99)", bounds=(-20, 99)),
}


def _check_calibration(value) -> str | None:
    if isinstance(value, int):
        return None  # a number of ns: Field.bounds
    if isinstance(value, str) and (value == "auto" or re.fullmatch(r"CPU[0-9]{1,4}", value)):
        return None
    return f"{value!r} is not allowed: use auto, CPU<n> or a positive integer (ns per loop)"


def parse_rtapp_log(path: str | Path):
    """One rt-app task log as a DataFrame with :data:`LOG_COLUMNS` (times in us)."""
    # deferred: pandas (~1 s) only to parse an rt-app log; spec checking imports this module
    import pandas as pd

    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            rows.append([int(x) for x in fields[:len(LOG_COLUMNS)]])
    return pd.DataFrame(rows, columns=list(LOG_COLUMNS))


def task_metrics(task: str, df) -> list[Metric]:
    """Per-task metrics from a parsed rt-app log."""
    if df.empty:
        raise WorkloadError(f"rt-app task {task} logged no activation")
    budget = df["c_period"] - df["c_duration"]
    perf_index = df["slack"] / budget.where(budget > 0)
    return [
        Metric(f"{task}_perf_index_mean", float(perf_index.mean()), "ratio", False),
        Metric(f"{task}_slack_mean", float(df["slack"].mean()), "us", False),
        Metric(f"{task}_slack_p5", float(df["slack"].quantile(0.05)), "us", False),
        Metric(f"{task}_missed_pct", float((df["slack"] < 0).mean() * 100), "%", True),
        Metric(f"{task}_wu_lat_mean", float(df["wu_lat"].mean()), "us", True),
        Metric(f"{task}_wu_lat_p99", float(df["wu_lat"].quantile(0.99)), "us", True),
        Metric(f"{task}_activations", float(len(df)), "count", False),
    ]


_CALIBRATION_CONF = {
    "global": {"duration": -1, "calibration": "CPU0", "log_size": "disable", "logdir": "./"},
    "tasks": {"calib": {"loop": 1, "phases": {"0": {
        "loop": 1, "run": 1000, "timer": {"ref": "unique", "period": 10000}}}}},
}


def measure_pload(target) -> int:
    """rt-app's own calibration on CPU0: nanoseconds of work per loop (``pLoad``)."""
    target.install_tools(["rt-app"])
    remote_dir = target.path.join(target.working_directory, "lisa-ext", "rtapp-calibration")
    remote_json = target.path.join(remote_dir, "calib.json")
    target.execute(f"mkdir -p {remote.quote(remote_dir)}")
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(_CALIBRATION_CONF, f)
        f.flush()
        target.push(f.name, remote_json)
    try:
        out = target.execute(f"cd {remote.quote(remote_dir)} && rt-app calib.json 2>&1", timeout=120)
    finally:
        target.execute(f"rm -rf {remote.quote(remote_dir)}", check_exit_code=False)
    m = re.search(r"pLoad\s*=\s*([0-9]+)\s*ns", out)
    if not m:
        raise WorkloadError("rt-app calibration printed no 'pLoad = <n>ns' line: " + out.strip()[-200:])
    return int(m.group(1))


class RtApp(Workload):
    KIND = "rtapp"
    TOOLS = ()  # LISA installs its own rt-app binary on the target
    SCHEMA = {
        "tasks": Field((dict,), "task name (1-7 letters/digits/_) -> {duty-cycle-pct, period-ms}", True,
                       lambda v: None if 0 < len(v) <= THREADS[1] else f"needs 1 to {THREADS[1]} tasks"),
        "duration-s": Field(Number, "how long every task runs, in seconds", True,
                            bounds=(0.1, DURATION_S[1])),
        "calibration": Field((str, int), "auto (measured once per campaign), CPU<n> or ns per loop",
                             check=_check_calibration, bounds=(1, 1_000_000)),
        "timeout-s": Field(Number, "kill rt-app after this many seconds (default: 5 x duration + 60)",
                           bounds=TIMEOUT_S),
    }

    @classmethod
    def check_options(cls, path, prefix, options):
        for name, task in options["tasks"].items():
            where = f"{prefix}.tasks.{name}"
            if not _TASK_NAME.match(str(name)):
                raise SpecError(path, where, "task names are 1-7 letters, digits or '_' "
                                "(rt-app appends a suffix and the kernel keeps 15 characters)")
            task = check_mapping(path, task, where, _TASK_SCHEMA)
            if "priority" in task:
                rt = task.get("policy") in _RT_POLICIES
                low, high = (1, 99) if rt else (-20, 19)
                if not low <= task["priority"] <= high:
                    raise SpecError(path, f"{where}.priority", f"must be in {low}..{high} for "
                                    f"{task.get('policy', 'SCHED_OTHER')}")

    def _lisa_rta(self):
        return import_lisa("lisa.wlgen.rta")

    def _profile(self):
        rta = self._lisa_rta()
        duration = float(self.options["duration-s"])
        profile = {}
        for name, task in self.options["tasks"].items():
            props = {}
            if "cpus" in task:
                props["prop_cpus"] = list(task["cpus"])
            if "policy" in task:
                props["prop_policy"] = task["policy"]
            if "priority" in task:
                props["prop_priority"] = int(task["priority"])
            profile[name] = rta.RTAPhase(prop_wload=rta.PeriodicWload(
                duty_cycle_pct=float(task["duty-cycle-pct"]),
                period=float(task["period-ms"]) / 1e3,
                duration=duration,
            ), **props)
        return profile

    def _timeout(self) -> float:
        return float(self.options.get("timeout-s", 5 * float(self.options["duration-s"]) + 60))

    def _calibration(self, state: dict):
        calib = self.options.get("calibration", "auto")
        if calib == "auto":
            return int(state["rtapp_pload_ns"])
        return calib

    def setup_campaign(self, target, state: dict) -> None:
        if "rtapp_pload_ns" not in state:
            state["rtapp_pload_ns"] = measure_pload(target)
        # LISA's RTA pre-reads plat_info['rtapp']['calib'] when deploying; giving it our
        # figure stops LISA from running its own calibration (which freezes userspace)
        cpus = target.number_of_cpus
        target.plat_info.add_src("lisa-ext rt-app calibration", {
            "rtapp": {"calib": {cpu: int(state["rtapp_pload_ns"]) for cpu in range(cpus)}}})

    def prepare(self, ctx: RunContext) -> None:
        rta = self._lisa_rta()
        self._wload = rta.RTA.from_profile(
            ctx.target, self._profile(), name="rtapp", res_dir=str(ctx.local_dir),
            log_stats=True, calibration=self._calibration(ctx.campaign_state),
        )
        # pushes the JSON and installs rt-app now, outside the traced window
        self._wload.deploy()

    def run(self, ctx: RunContext) -> list[Metric]:
        wload = self._wload
        try:
            with wload.run_background() as bg:
                ctx.on_pid(int(bg.pid))
                remote.wait(ctx.target, bg, self._timeout(), "rt-app")
        except subprocess.CalledProcessError as exc:
            out = (exc.stdout or b"").decode(errors="replace").strip().splitlines()[-3:]
            raise WorkloadError(f"rt-app exited with status {exc.returncode}: {' | '.join(out)}") from None
        finally:
            # pulls the per-task logs into the run directory and wipes the target side
            wload.cleanup()
        metrics = []
        for task in sorted(self.options["tasks"]):
            logs = sorted(ctx.local_dir.glob(f"rt-app-{task}-*.log"))
            if not logs:
                raise WorkloadError(f"rt-app wrote no log for task {task}")
            metrics += task_metrics(task, parse_rtapp_log(logs[0]))
        return metrics

    def cleanup(self, ctx: RunContext) -> None:
        wload = getattr(self, "_wload", None)
        if wload is not None:
            wload.cleanup()
            self._wload = None
