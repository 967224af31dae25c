"""rt-app: task sets built from the spec's tasks, measured from rt-app's logs.

A task is either one periodic phase (run ``duty-cycle-pct`` of every ``period-ms`` for
``duration-s``) or a list of ``phases``, each with its own load: ``duty-cycle-pct`` of a
``period-ms`` (util-style), ``run-ms`` then ``sleep-ms``, or ``run-ms`` then the rest of a
``period-ms``, repeated ``loop`` times or for ``duration-s``; the task may wait ``delay-ms``
first and go through its phases ``loop`` times (``-1``: until the workload's ``duration-s``).
:func:`rtapp_conf` writes rt-app's JSON from them (rt-app's grammar, ``doc/tutorial.txt``:
``global``, and per task ``loop``, ``delay``, ``policy``, ``priority``, ``cpus``, ``phases``
holding ``loop``, ``run``, ``sleep``, ``timer``); LISA's :class:`lisa.wlgen.rta.RTA` pushes it,
installs its own rt-app binary on the target and runs it.

rt-app logs one line per activation (``log_size: file``); per task we report the mean
performance index ``slack / (c_period - c_duration)`` as LISA's
``RTAEventsAnalysis.df_rtapp_stats`` defines it (1 = finished right away, 0 = just on time,
< 0 = late), the mean and 5th percentile slack, the share of activations that missed their
period, and the wake-up latency mean and 99th percentile, over all of the task's phases.

rt-app needs a calibration (ns of CPU work per loop). ``calibration: auto``
measures it once per campaign, before any variant is applied, with rt-app's own
``calibration: CPU0`` and reuses the figure for every run so variants are
compared on the same amount of work. (LISA's platform-info calibration is not
used: it freezes all of userspace on the target while it runs.)
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from lisa_ext.campaign import remote
from lisa_ext.campaign.store.records import Metric
from lisa_ext.campaign.workloads.base import RunContext, Workload, WorkloadError
from lisa_ext.compat import import_lisa
from lisa_ext.errors import SpecError
from lisa_ext.schema import DURATION_S, THREADS, TIMEOUT_S, Field, Number, check_mapping, in_bounds, show

__all__ = ["LOG_COLUMNS", "RtApp", "parse_rtapp_log", "rtapp_conf", "task_metrics"]

#: columns of rt-app's per-task log file (rt-app doc/tutorial.txt, "log_size")
LOG_COLUMNS = ("idx", "perf", "run", "period", "start", "end", "rel_st", "slack",
               "c_duration", "c_period", "wu_lat")
_TASK_NAME = re.compile(r"^[A-Za-z0-9_]{1,7}\Z")
#: sched_setattr(2) policies rt-app accepts for periodic tasks
_POLICIES = ("SCHED_OTHER", "SCHED_BATCH", "SCHED_IDLE", "SCHED_FIFO", "SCHED_RR")
_RT_POLICIES = ("SCHED_FIFO", "SCHED_RR")
#: phases of one task, and times one phase or one task repeats: bounded so that the JSON stays small
MAX_PHASES = 1000
MAX_LOOP = 1_000_000


def _cpus_problem(value: Any) -> str | None:
    if value and all(isinstance(c, int) and in_bounds(c, 0, THREADS[1] - 1) for c in value):
        return None
    return f"must be a list of CPU numbers (0 to {THREADS[1] - 1})"


def _task_loop_problem(value: Any) -> str | None:
    return "0 is not allowed: -1 (until duration-s) or 1 or more times" if value == 0 else None


_PHASE_SCHEMA = {
    "duty-cycle-pct": Field(Number, "share of each period-ms spent running (util-style load)",
                            bounds=(0.01, 100)),
    "period-ms": Field(Number, "activation period in milliseconds: the phase runs, then waits for "
                       "the period's end", bounds=(0.01, 60_000)),
    "run-ms": Field(Number, "milliseconds of CPU work per activation (calibrated, not wall time)",
                    bounds=(0.001, 3_600_000)),
    "sleep-ms": Field(Number, "milliseconds to sleep after running", bounds=(0.001, 3_600_000)),
    "duration-s": Field(Number, "how long the phase lasts, in whole periods", bounds=(0.001, DURATION_S[1])),
    "loop": Field((int,), "how many times the phase repeats (default 1)", bounds=(1, MAX_LOOP)),
    "cpus": Field((list,), "CPUs the task may run on during this phase", check=_cpus_problem),
}

_TASK_SCHEMA = {
    "duty-cycle-pct": Field(Number, "share of each period spent running, for the workload's duration-s "
                            "(one periodic phase)", bounds=(0.01, 100)),
    "period-ms": Field(Number, "activation period in milliseconds (one periodic phase)", bounds=(0.01, 60_000)),
    "phases": Field((list,), "the task's phases, in order: each {duty-cycle-pct, period-ms} or run-ms, "
                    "sleep-ms, period-ms, with duration-s or loop, cpus",
                    check=lambda v: None if 0 < len(v) <= MAX_PHASES else f"needs 1 to {MAX_PHASES} phases"),
    "loop": Field((int,), "times the task goes through its phases: -1 until duration-s (default 1)",
                  check=_task_loop_problem, bounds=(-1, MAX_LOOP)),
    "delay-ms": Field(Number, "milliseconds the task waits before its first phase", bounds=(0, 86_400_000)),
    "cpus": Field((list,), "CPUs the task may run on (default: all)", check=_cpus_problem),
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


def _check_phase(path, where: str, phase: dict) -> None:
    """The combinations of a phase's keys that make one rt-app phase."""
    def refuse(key: str, problem: str) -> None:
        raise SpecError(path, f"{where}.{key}", problem)

    if "duty-cycle-pct" in phase:
        if "period-ms" not in phase:
            refuse("period-ms", "missing: duty-cycle-pct is a share of period-ms")
        for key in ("run-ms", "sleep-ms"):
            if key in phase:
                refuse(key, "not with duty-cycle-pct: give duty-cycle-pct and period-ms, or run-ms "
                       "with sleep-ms or period-ms")
    elif "run-ms" not in phase and "sleep-ms" not in phase:
        raise SpecError(path, where, "a phase needs duty-cycle-pct and period-ms, run-ms or sleep-ms")
    elif "period-ms" in phase:
        if "sleep-ms" in phase:
            refuse("sleep-ms", "not with period-ms: the phase sleeps until the period's end")
        if "run-ms" not in phase:
            refuse("period-ms", "needs run-ms (the work done each period)")
        if phase["run-ms"] > phase["period-ms"]:
            refuse("run-ms", f"{show(phase['run-ms'])} ms is longer than period-ms {show(phase['period-ms'])}")
    if "duration-s" in phase:
        if "loop" in phase:
            refuse("loop", "not with duration-s: give one of them")
        if "period-ms" not in phase:
            refuse("duration-s", "needs period-ms (the phase lasts whole periods); give loop instead")
        if phase["duration-s"] * 1000 < phase["period-ms"]:
            refuse("duration-s", f"{show(phase['duration-s'])} s is shorter than one period "
                   f"({show(phase['period-ms'])} ms)")


def _check_task(path, where: str, task: dict, duration_s: float) -> None:
    task = check_mapping(path, task, where, _TASK_SCHEMA)
    periodic = [key for key in ("duty-cycle-pct", "period-ms") if key in task]
    if "phases" in task:
        if periodic:
            raise SpecError(path, f"{where}.{periodic[0]}", "not with phases: a task is one periodic "
                            "phase (duty-cycle-pct, period-ms) or a list of phases")
        for i, phase in enumerate(task["phases"]):
            phase_where = f"{where}.phases[{i}]"
            _check_phase(path, phase_where, check_mapping(path, phase, phase_where, _PHASE_SCHEMA))
    elif len(periodic) < 2:
        missing = "period-ms" if periodic == ["duty-cycle-pct"] else "duty-cycle-pct"
        raise SpecError(path, f"{where}.{missing}", "missing: a task needs duty-cycle-pct and period-ms "
                        "(one periodic phase for duration-s) or phases")
    elif "loop" in task:
        raise SpecError(path, f"{where}.loop", "only with phases: one periodic phase runs for duration-s")
    if "priority" in task:
        rt = task.get("policy") in _RT_POLICIES
        low, high = (1, 99) if rt else (-20, 19)
        if not low <= task["priority"] <= high:
            raise SpecError(path, f"{where}.priority", f"must be in {low}..{high} for "
                            f"{task.get('policy', 'SCHED_OTHER')}")
    if task.get("delay-ms", 0) >= duration_s * 1000:
        raise SpecError(path, f"{where}.delay-ms", f"{show(task['delay-ms'])} ms leaves nothing of "
                        f"duration-s ({show(duration_s)} s)")


def _us(ms: float) -> int:
    """Milliseconds as rt-app's whole microseconds (rounded up, as LISA does)."""
    return math.ceil(round(ms * 1000, 3))


def _phase_json(phase: dict) -> dict:
    """One phase of the spec as an rt-app phase: ``loop`` first, then its events in order."""
    period = phase.get("period-ms")
    loop = phase.get("loop", 1)
    if "duration-s" in phase:
        loop = max(1, math.floor(round(phase["duration-s"] * 1000 / period, 9)))
    out: dict[str, Any] = {"loop": loop}
    if "duty-cycle-pct" in phase:
        if phase["duty-cycle-pct"] == 100:
            # all work, no timer to miss: one run as long as the phase (LISA's PeriodicWload does the same)
            out.update(loop=1, run=_us(phase["duration-s"] * 1000 if "duration-s" in phase else loop * period))
        else:
            out.update(run=_us(phase["duty-cycle-pct"] * period / 100),
                       timer={"ref": "unique", "period": _us(period)})
    else:
        if "run-ms" in phase:
            out["run"] = _us(phase["run-ms"])
        if "sleep-ms" in phase:
            out["sleep"] = _us(phase["sleep-ms"])
        if period is not None:
            out["timer"] = {"ref": "unique", "period": _us(period)}
    if "cpus" in phase:
        out["cpus"] = list(phase["cpus"])
    return out


def rtapp_conf(options: dict, calibration: int | str, logdir: str) -> dict:
    """rt-app's JSON configuration for a validated ``rtapp`` workload's options: one task per
    spec task, in name order (rt-app names the threads ``<task>-<index>``, counting in that order)."""
    duration = options["duration-s"]
    tasks = {}
    for name in sorted(options["tasks"]):
        task = options["tasks"][name]
        phases = task.get("phases") or [{"duty-cycle-pct": task["duty-cycle-pct"],
                                         "period-ms": task["period-ms"], "duration-s": duration}]
        entry: dict[str, Any] = {"loop": task.get("loop", 1)}
        if "delay-ms" in task:
            entry["delay"] = _us(task["delay-ms"])
        for key in ("policy", "priority", "cpus"):
            if key in task:
                entry[key] = task[key]
        entry["phases"] = {str(i): _phase_json(phase) for i, phase in enumerate(phases)}
        tasks[name] = entry
    # rt-app stops every task after its global duration (whole seconds); tasks of one periodic
    # phase end by themselves, so their campaigns keep rt-app's "no limit"
    phased = any("phases" in task for task in options["tasks"].values())
    return {
        "global": {"duration": int(duration) if phased else -1, "calibration": calibration,
                   "lock_pages": False, "log_size": "file", "ftrace": "", "logdir": logdir},
        "tasks": tasks,
    }


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
        "tasks": Field((dict,), "task name (1-7 letters/digits/_) -> {duty-cycle-pct, period-ms} or "
                       "{phases: [...]}, with delay-ms, loop, cpus, policy, priority", True,
                       lambda v: None if 0 < len(v) <= THREADS[1] else f"needs 1 to {THREADS[1]} tasks"),
        "duration-s": Field(Number, "how long a task of one periodic phase runs, and when rt-app stops "
                            "every task, in seconds", True, bounds=(0.1, DURATION_S[1])),
        "calibration": Field((str, int), "auto (measured once per campaign), CPU<n> or ns per loop",
                             check=_check_calibration, bounds=(1, 1_000_000)),
        "timeout-s": Field(Number, "kill rt-app after this many seconds (default: 5 x duration + 60)",
                           bounds=TIMEOUT_S),
    }

    @classmethod
    def check_options(cls, path, prefix, options):
        duration = options["duration-s"]
        for name, task in options["tasks"].items():
            where = f"{prefix}.tasks.{name}"
            if not _TASK_NAME.match(str(name)):
                raise SpecError(path, where, "task names are 1-7 letters, digits or '_' "
                                "(rt-app appends a suffix and the kernel keeps 15 characters)")
            _check_task(path, where, task, duration)
        phased = any(isinstance(task, dict) and "phases" in task for task in options["tasks"].values())
        if phased and duration != int(duration):
            raise SpecError(path, f"{prefix}.duration-s", f"{show(duration)} is not a whole number of "
                            "seconds: with phases it is rt-app's own duration, in whole seconds")

    def _lisa_rta(self):
        return import_lisa("lisa.wlgen.rta")

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
        # LISA fills in its run directory and the calibration where its template says
        # __LOGDIR__ and __PVALUE__ (bare, as JSON values)
        text = json.dumps(rtapp_conf(self.options, "__PVALUE__", "__LOGDIR__"), indent=1)
        text = text.replace('"__PVALUE__"', "__PVALUE__").replace('"__LOGDIR__"', "__LOGDIR__")
        self._wload = rta.RTA.from_str(ctx.target, text, name="rtapp", res_dir=str(ctx.local_dir),
                                       log_stats=True, calibration=self._calibration(ctx.campaign_state))
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
