"""Independent reference figures for the analysis tests.

Reads ``trace-cmd report -N -R -t`` text (raw fields, nanosecond timestamps)
line by line and computes every figure with plain Python loops, in file
order. It shares no code with :mod:`lisa_ext.analysis`: the rules are written
again from the kernel sources they come from (drivers/cpuidle/cpuidle.c,
kernel/workqueue.c, include/trace/events/{sched,block}.h).

Also records small live traces for the tests (root, tracefs, trace-cmd, fio).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from collections import defaultdict, deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

_LINE = re.compile(
    r"^(?:\S+:\s+)?(?P<comm>.*?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?:\S+\s+)?"
    r"(?P<sec>\d+)\.(?P<frac>\d+):\s+(?P<event>\w+):\s*(?P<fields>.*)$"
)
_FIELD = re.compile(r"(\w+)=(.*?)(?=\s+\w+=|\s*$)")

IDLE_EXIT = 4294967295


class Event:
    __slots__ = ("comm", "pid", "cpu", "ns", "name", "f")

    def __init__(self, comm, pid, cpu, ns, name, f):
        self.comm, self.pid, self.cpu, self.ns, self.name, self.f = comm, pid, cpu, ns, name, f

    @property
    def t(self) -> float:
        return self.ns / 1e9


def report_events(path, events=None) -> list[Event]:
    """Events of ``path`` as ``trace-cmd report -N -R -t`` prints them.

    A report that fails or prints no event is run once more, then fails the test with what
    trace-cmd said: one CI run got no event from a trace that reports 7,821 lines every other time,
    and the reference then silently compared against nothing."""
    cmd = ["trace-cmd", "report", "-N", "-R", "-t"]
    for e in events or ():
        cmd += ["-F", e]
    for _ in range(2):
        proc = subprocess.run(cmd + [str(path)], capture_output=True, text=True, errors="replace")
        parsed = parse_report(proc.stdout.splitlines())
        if proc.returncode == 0 and (parsed or events):
            return parsed
    raise AssertionError(f"{' '.join(cmd)} {path}: exit status {proc.returncode}, {len(parsed)} events, "
                         f"{len(proc.stdout)} bytes of output; stderr: {proc.stderr[-2000:]!r}")


def parse_report(lines) -> list[Event]:
    parsed = []
    for line in lines:
        m = _LINE.match(line)
        if not m:
            continue
        frac = m["frac"]
        ns = int(m["sec"]) * 10**9 + int(frac.ljust(9, "0")[:9])
        fields = dict(_FIELD.findall(m["fields"]))
        parsed.append(Event(m["comm"].strip(), int(m["pid"]), int(m["cpu"]), ns, m["event"], fields))
    return parsed


def percentile(values, q) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def stats(values) -> dict:
    n = len(values)
    return {
        "count": n,
        "mean": sum(values) / n,
        "gmean": math.exp(sum(math.log(v) for v in values) / n) if all(v > 0 for v in values) else 0.0,
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values),
    }


# --- idle misses -----------------------------------------------------------

#: Juno r0: (exit latency, target residency) in ns, from cpuidle-arm.c (WFI)
#: and juno.dts (entry + exit latency, min-residency) via dt_idle_states.c.
JUNO_STATES = [(1_000, 1_000), (1_500_000, 2_000_000), (1_600_000, 2_500_000)]
JUNO_CLUSTERS = {0: 0, 3: 0, 4: 0, 5: 0, 1: 1, 2: 1}


def idle_misses(events, states=None) -> dict:
    """Per CPU / per state: wakeups, too_deep, too_shallow. Derived from
    cpu_idle intervals when ``states`` is given, else counted from cpu_idle_miss."""
    per_cpu = defaultdict(lambda: {"wakeups": 0, "too_deep": 0, "too_shallow": 0})
    per_state = defaultdict(lambda: {"wakeups": 0, "too_deep": 0, "too_shallow": 0})
    entered = {}
    for e in events:
        if e.name == "cpu_idle":
            cpu, state = int(e.f["cpu_id"]), int(e.f["state"])
            if state != IDLE_EXIT:
                entered[cpu] = (state, e.ns)
                continue
            per_cpu[cpu]["wakeups"] += 1
            if cpu not in entered:
                continue
            s, start = entered.pop(cpu)
            per_state[s]["wakeups"] += 1
            if states is None:
                continue
            diff = e.ns - start
            latency, target = states[s]
            kind = None
            if diff < target:
                if s > 0:  # a shallower state exists (none disabled on Juno)
                    kind = "too_deep"
            elif diff > latency and s + 1 < len(states) and diff - latency >= states[s + 1][1]:
                kind = "too_shallow"
            if kind:
                per_cpu[cpu][kind] += 1
                per_state[s][kind] += 1
        elif e.name == "cpu_idle_miss" and states is None:
            if "below" in e.f:  # raw (-R) output
                below = e.f["below"] not in ("0", "false")
            else:  # printed output: type=above|below
                below = e.f["type"] == "below"
            kind = "too_shallow" if below else "too_deep"
            per_cpu[int(e.f["cpu_id"])][kind] += 1
            per_state[int(e.f["state"])][kind] += 1
    return {"cpus": dict(per_cpu), "states": dict(per_state)}


# --- wakeup latency --------------------------------------------------------

def wakeup_latencies(events, wake_event="sched_waking") -> dict[int, dict]:
    """pid -> {"comm", "latencies": [s], "cpus": [cpu of switch-in]}."""
    running: dict[int, bool] = {}
    pending: dict[int, int] = {}
    out: dict[int, dict] = defaultdict(lambda: {"comm": None, "latencies": [], "cpus": []})
    comm_at_wake: dict[int, str] = {}
    for e in events:
        if e.name == "sched_switch":
            prev, nxt = int(e.f["prev_pid"]), int(e.f["next_pid"])
            running[prev] = False
            pending.pop(prev, None)
            if nxt in pending:
                rec = out[nxt]
                rec["latencies"].append((e.ns - pending.pop(nxt)) / 1e9)
                rec["cpus"].append(e.cpu)
                rec["comm"] = comm_at_wake[nxt]
            running[nxt] = True
        elif e.name == wake_event:
            pid = int(e.f["pid"])
            if pid == 0 or running.get(pid) or pid in pending:
                continue
            pending[pid] = e.ns
            comm_at_wake[pid] = e.f["comm"]
    return dict(out)


# --- workqueue placement ---------------------------------------------------

def work_items(events) -> list[dict]:
    queued: dict[str, deque] = defaultdict(deque)
    items = []
    open_items: dict[tuple[str, int], dict] = {}
    for e in events:
        if e.name == "workqueue_queue_work":
            queued[e.f["work"]].append(e)
        elif e.name == "workqueue_execute_start":
            if queued[e.f["work"]]:
                q = queued[e.f["work"]].popleft()
                item = {
                    "function": q.f["function"],
                    "workqueue": q.f["workqueue"],
                    "queue_cpu": q.cpu,
                    "req_cpu": int(q.f["req_cpu"]),
                    "exec_cpu": e.cpu,
                    "worker_pid": e.pid,
                    "latency": (e.ns - q.ns) / 1e9,
                    "duration": None,
                }
                items.append(item)
                open_items[(e.f["work"], e.pid)] = (item, e.ns)
        elif e.name == "workqueue_execute_end":
            key = (e.f["work"], e.pid)
            if key in open_items:
                item, start = open_items.pop(key)
                item["duration"] = (e.ns - start) / 1e9
    return items


def placement(items, key, llc=None) -> dict:
    groups = defaultdict(list)
    for it in items:
        groups[it[key]].append(it)
    out = {}
    for name, its in groups.items():
        out[name] = {
            "count": len(its),
            "same_cpu_frac": sum(i["queue_cpu"] == i["exec_cpu"] for i in its) / len(its),
            "same_llc_frac": (sum(llc[i["queue_cpu"]] == llc[i["exec_cpu"]] for i in its) / len(its)) if llc else None,
            "lat_p50": percentile([i["latency"] for i in its], 50),
            "lat_p99": percentile([i["latency"] for i in its], 99),
        }
    return out


# --- iowait / frequency / block ------------------------------------------

def task_io(events) -> dict[int, dict]:
    """pid -> comm, iowait_count / iowait_delay_s (D-state sleeps to the next
    switch-in), runtime_s, mean_freq_running_khz (None when unknown)."""
    freq_changes: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e.name == "cpu_frequency":
            freq_changes[int(e.f["cpu_id"])].append((e.ns, int(e.f["state"])))

    def freq_integral(cpu, a, b):
        """(kHz*s, seconds) over [a, b) where the frequency is known."""
        changes = freq_changes.get(cpu, [])
        area = known = 0.0
        for k, (t, f) in enumerate(changes):
            t_next = changes[k + 1][0] if k + 1 < len(changes) else max(b, t)
            lo, hi = max(a, t), min(b, t_next)
            if hi > lo:
                area += f * (hi - lo) / 1e9
                known += (hi - lo) / 1e9
        return area, known

    tasks = defaultdict(lambda: {"comm": None, "iowait_count": 0, "iowait_delay_s": 0.0, "runtime_s": 0.0, "area": 0.0, "known": 0.0})
    current: dict[int, tuple[int, int, str]] = {}
    last_out: dict[int, tuple[int, int]] = {}
    for e in events:
        if e.name != "sched_switch":
            continue
        prev, nxt = int(e.f["prev_pid"]), int(e.f["next_pid"])
        if e.cpu in current:
            pid, start, comm = current[e.cpu]
            if pid != 0:
                rec = tasks[pid]
                rec["runtime_s"] += (e.ns - start) / 1e9
                rec["comm"] = comm
                area, known = freq_integral(e.cpu, start, e.ns)
                rec["area"] += area
                rec["known"] += known
        current[e.cpu] = (nxt, e.ns, e.f["next_comm"])
        if prev != 0:
            last_out[prev] = (e.ns, int(e.f["prev_state"]))
        if nxt in last_out:
            t_out, state = last_out.pop(nxt)
            if state & 0x2 and not state & 0x400:
                tasks[nxt]["iowait_count"] += 1
                tasks[nxt]["iowait_delay_s"] += (e.ns - t_out) / 1e9
    result = {}
    for pid, rec in tasks.items():
        rec["mean_freq_running_khz"] = rec["area"] / rec["known"] if rec["known"] > 0 else None
        result[pid] = {k: rec[k] for k in ("comm", "iowait_count", "iowait_delay_s", "runtime_s", "mean_freq_running_khz")}
    return result


def block_devices(events) -> dict[str, dict]:
    last_issue: dict[tuple[str, str], int] = {}
    service = defaultdict(list)
    completes = defaultdict(list)
    for e in events:
        if e.name == "block_rq_issue":
            last_issue[(e.f["dev"], e.f["sector"])] = e.ns
        elif e.name == "block_rq_complete":
            completes[e.f["dev"]].append(e.ns)
            t = last_issue.pop((e.f["dev"], e.f["sector"]), None)
            if t is not None:
                service[e.f["dev"]].append((e.ns - t) / 1e9)
    out = {}
    for dev, ts in completes.items():
        d = int(dev)
        span = (max(ts) - min(ts)) / 1e9
        out[f"{d >> 20},{d & 0xFFFFF}"] = {
            "requests": len(service[dev]),
            "iops": len(ts) / span if span > 0 else None,
            "service_p50": percentile(service[dev], 50),
            "service_p90": percentile(service[dev], 90),
            "service_p99": percentile(service[dev], 99),
        }
    return out


# --- live traces -----------------------------------------------------------

LIVE_EVENTS = [
    "sched:sched_switch", "sched:sched_waking", "sched:sched_wakeup", "workqueue",
    "block:block_rq_issue", "block:block_rq_complete", "power:cpu_idle", "power:cpu_idle_miss",
]


def live_capability() -> str | None:
    """None when a trace can be recorded here, else why not."""
    if os.geteuid() != 0:
        return "recording a trace needs root"
    if not os.path.isdir("/sys/kernel/tracing/instances"):
        return "tracefs is not mounted at /sys/kernel/tracing"
    for tool in ("trace-cmd", "fio"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


#: what the live fio run is made to cause, whatever the host's load: this many O_DIRECT 4k reads,
#: each followed by a 2 ms think time, which fio sleeps (nanosleep) and is woken from
LIVE_FIO_IOS = 300


def record_fio_trace() -> Path:
    """A fio psync O_DIRECT randread trace of :data:`LIVE_FIO_IOS` reads, recorded once per
    process; fio's JSON report is beside it (:func:`live_fio_ios`)."""
    out_dir = Path(tempfile.gettempdir()) / f"lisa-ext-analysis-tests-{os.getpid()}"
    trace = out_dir / "fio.dat"
    if trace.exists():
        return trace
    out_dir.mkdir(exist_ok=True)
    instance = f"lisa_ext_analysis_{os.getpid()}"
    cmd = ["trace-cmd", "record", "--no-filter", "-d", "-B", instance, "-b", "4096", "-o", str(trace)]
    for e in LIVE_EVENTS:
        cmd += ["-e", e]
    # a fixed number of reads, not a fixed time: a busy host makes the run longer, never smaller;
    # on CPU 0, the one where this host's kernel traces idle -> task switches (docs/analyses.md)
    cmd += ["--", "fio", "--cpus_allowed=0", "--name=t", f"--filename={out_dir / 'fiofile'}", "--size=16M",
            "--rw=randread", "--bs=4k", "--ioengine=psync", "--direct=1", f"--number_ios={LIVE_FIO_IOS}", "--thinktime=2000",
            "--runtime=60", "--output-format=json", f"--output={out_dir / 'fio.json'}"]
    try:
        subprocess.run(cmd, capture_output=True, timeout=180)
    finally:
        try:
            os.rmdir(f"/sys/kernel/tracing/instances/{instance}")
        except OSError:
            pass
        (out_dir / "fiofile").unlink(missing_ok=True)
    if not trace.exists() or trace.stat().st_size == 0:
        raise RuntimeError(f"trace-cmd record wrote no trace: {' '.join(cmd)}")
    return trace


def live_fio_ios(trace: Path) -> int:
    """How many reads fio reports for the live trace at ``trace`` (its JSON report)."""
    report = json.loads((Path(trace).parent / "fio.json").read_text())
    return sum(job["read"]["total_ios"] for job in report["jobs"])


def juno_text_with_idle_misses(path, out) -> dict:
    """A text trace of the Juno trace's ``cpu_idle`` events with a
    ``cpu_idle_miss`` line after each exit where the kernel would have emitted
    one (event-mode input: no trace recorded here can contain the event, the
    host has no cpuidle driver). Returns the counts written, as idle_misses()."""
    out_lines = []
    entered = {}
    text = subprocess.run(["trace-cmd", "report", "-N", "-t", str(path)], capture_output=True, text=True).stdout
    for line in text.splitlines():
        if line.startswith("cpus="):
            out_lines.append(line)
            continue
        m = _LINE.match(line)
        if not m or m["event"] != "cpu_idle":
            continue
        out_lines.append(line)
        f = dict(_FIELD.findall(m["fields"]))
        cpu, state = int(f["cpu_id"]), int(f["state"])
        ns = int(m["sec"]) * 10**9 + int(m["frac"].ljust(9, "0")[:9])
        if state != IDLE_EXIT:
            entered[cpu] = (state, ns)
            continue
        if cpu not in entered:
            continue
        s, start = entered.pop(cpu)
        diff = ns - start
        latency, target = JUNO_STATES[s]
        kind = None
        if diff < target and s > 0:
            kind = "above"
        elif diff >= target and diff > latency and s + 1 < len(JUNO_STATES) and diff - latency >= JUNO_STATES[s + 1][1]:
            kind = "below"
        if kind:
            prefix = line[: line.index("cpu_idle:")]
            out_lines.append(f"{prefix}cpu_idle_miss:        cpu_id={cpu} state={s} type={kind}")
    Path(out).write_text("\n".join(out_lines) + "\n")
    return idle_misses(parse_report(out_lines))


def wakeup_frequency(events, window_ms=4.0) -> dict[bool, dict]:
    """after_iowait (D-state sleep) -> {"wakeups", "mean_freq_khz"}: mean over
    wakeups (switch-in after a non-preempted switch-out) of the CPU's mean
    frequency in the window after the switch-in, where known."""
    changes: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e.name == "cpu_frequency":
            changes[int(e.f["cpu_id"])].append((e.ns, int(e.f["state"])))
    out_state: dict[int, int] = {}
    per_kind = {True: [], False: []}
    window = round(window_ms * 1e6)
    for e in events:
        if e.name != "sched_switch":
            continue
        prev, nxt = int(e.f["prev_pid"]), int(e.f["next_pid"])
        if prev != 0:
            out_state[prev] = int(e.f["prev_state"])
        state = out_state.pop(nxt, None)
        if nxt == 0 or state is None or not state & 0xFF:
            continue
        a, b = e.ns, e.ns + window
        area = known = 0.0
        steps = changes.get(e.cpu, [])
        for k, (t, f) in enumerate(steps):
            t_next = steps[k + 1][0] if k + 1 < len(steps) else max(b, t)
            lo, hi = max(a, t), min(b, t_next)
            if hi > lo:
                area += f * (hi - lo)
                known += hi - lo
        d_state = bool(state & 0x2) and not state & 0x400
        per_kind[d_state].append(area / known if known else None)
    result = {}
    for kind, means in per_kind.items():
        if means:
            known_means = [m for m in means if m is not None]
            result[kind] = {"wakeups": len(means), "mean_freq_khz": sum(known_means) / len(known_means) if known_means else None}
    return result


def frequency_residency(events) -> dict[tuple[int, int], tuple[float, float]]:
    """(cpu, kHz) -> (seconds inside, outside) the running slices of tasks with
    a D-state sleep, from the CPU's first cpu_frequency event to the last
    sched_switch / cpu_frequency event of the trace."""
    changes: dict[int, list[tuple[int, int]]] = defaultdict(list)
    io_pids, last_out, slices = set(), {}, []
    current: dict[int, tuple[int, int]] = {}
    end = 0
    for e in events:
        if e.name == "cpu_frequency":
            changes[int(e.f["cpu_id"])].append((e.ns, int(e.f["state"])))
            end = max(end, e.ns)
        elif e.name == "sched_switch":
            end = max(end, e.ns)
            prev, nxt = int(e.f["prev_pid"]), int(e.f["next_pid"])
            if e.cpu in current:
                slices.append((e.cpu, *current[e.cpu], e.ns))
            current[e.cpu] = (nxt, e.ns)
            if prev != 0:
                last_out[prev] = int(e.f["prev_state"])
            state = last_out.pop(nxt, None)
            if state is not None and state & 0x2 and not state & 0x400 and nxt != 0:
                io_pids.add(nxt)
    result: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for cpu, steps in changes.items():
        io = [(a, b) for c, pid, a, b in slices if c == cpu and pid in io_pids]
        cuts = sorted({t for t, _ in steps} | {x for s in io for x in s} | {end})
        cuts = [c for c in cuts if steps[0][0] <= c <= end]
        for left, right in zip(cuts, cuts[1:]):
            freq = [f for t, f in steps if t <= left][-1]
            inside = any(a <= left < b for a, b in io)
            result[(cpu, freq)][0 if inside else 1] += (right - left) / 1e9
    return {k: tuple(v) for k, v in result.items()}


# --- energy ------------------------------------------------------------------


def energy_mj(events, model: dict, window_ns=None) -> dict:
    """Energy (mJ) per CPU from cpu_frequency + cpu_idle, walking the events in
    file order: each CPU's (frequency, idle state) is priced by ``model`` (the
    model-file dict) from the first to the last event of the whole trace. The
    state before a CPU's first event of a kind is what that event implies
    (its frequency; busy before an entry, state 0 before an exit). With
    ``window_ns`` only the time inside (start, end) counts."""
    start, end = min(e.ns for e in events), max(e.ns for e in events)
    lo_ns, hi_ns = window_ns or (start, end)
    opp, idle, cluster_of = {}, {}, {}
    for name, c in model["clusters"].items():
        for cpu in c["cpus"]:
            cluster_of[cpu] = name
            opp[cpu] = {int(k): v for k, v in c["opp_mw"].items()}
            idle[cpu] = {int(k): v for k, v in c["idle_mw"].items()}
    first_freq, first_idle = {}, {}
    for e in events:
        cpu = int(e.f.get("cpu_id", -1))
        if e.name == "cpu_frequency":
            first_freq.setdefault(cpu, int(e.f["state"]))
        elif e.name == "cpu_idle":
            state = int(e.f["state"])
            first_idle.setdefault(cpu, None if state != IDLE_EXIT else 0)
    cpus = set(first_freq) | set(first_idle)
    freq = {cpu: first_freq[cpu] for cpu in cpus}
    state = {cpu: first_idle.get(cpu) for cpu in cpus}
    since = {cpu: start for cpu in cpus}
    energy = dict.fromkeys(cpus, 0.0)

    def close(cpu, ns):
        power = opp[cpu][freq[cpu]] if state[cpu] is None else idle[cpu][state[cpu]]
        overlap = min(ns, hi_ns) - max(since[cpu], lo_ns)
        if overlap > 0:
            energy[cpu] += overlap / 1e9 * power
        since[cpu] = ns

    for e in events:
        if e.name not in ("cpu_frequency", "cpu_idle"):
            continue
        cpu, value = int(e.f["cpu_id"]), int(e.f["state"])
        close(cpu, e.ns)
        if e.name == "cpu_frequency":
            freq[cpu] = value
        else:
            state[cpu] = None if value == IDLE_EXIT else value
    for cpu in cpus:
        close(cpu, end)
    clusters = defaultdict(float)
    for cpu, mj in energy.items():
        clusters[cluster_of[cpu]] += mj
    return {"cpus": energy, "clusters": dict(clusters), "total": sum(energy.values()), "window_ns": (lo_ns, hi_ns)}


def capacity_placement(events, capacities: dict[int, int]) -> dict:
    """Per task runtime on each capacity class, class migrations and wake-up placement.

    Classes: the distinct capacities in increasing order, named little/big (two) or
    little/mid/big (three). Runtime: a ``sched_switch`` on a CPU starts ``next_pid``'s stretch
    there and ends the previous one; the last stretch of a CPU ends at the trace's last event.
    A migration is a switch-in of a task on a CPU of another class than its previous switch-in.
    Wake-ups: ``target_cpu`` of ``sched_wakeup`` and ``sched_wakeup_new``; the overutilized flag
    at a wake-up is the last ``sched_overutilized`` event's before it (None before the first).
    """
    levels = sorted(set(capacities.values()))
    names = {2: ["little", "big"], 3: ["little", "mid", "big"]}.get(len(levels), [f"cap{c}" for c in levels])
    name_of = {cpu: names[levels.index(cap)] for cpu, cap in capacities.items()}
    level_of = {cpu: levels.index(cap) for cpu, cap in capacities.items()}
    runtime = defaultdict(float)      # (pid, class) -> seconds
    running = {}                      # cpu -> (pid, ns)
    last_cpu = {}                     # pid -> cpu of its last switch-in
    moves = defaultdict(lambda: [0, 0, 0])  # pid -> [up, down, switch-ins]
    wakeups = []                      # (class, overutilized)
    overutilized = None
    end = 0
    for e in events:
        end = max(end, e.ns)
        if e.name == "sched_switch":
            cpu = e.cpu
            if cpu in running and running[cpu][0] != 0:
                pid, since = running[cpu]
                runtime[(pid, name_of[cpu])] += (e.ns - since) / 1e9
            pid = int(e.f["next_pid"])
            running[cpu] = (pid, e.ns)
            if pid != 0:
                if pid in last_cpu:
                    step = level_of[cpu] - level_of[last_cpu[pid]]
                    moves[pid][0] += step > 0
                    moves[pid][1] += step < 0
                moves[pid][2] += 1
                last_cpu[pid] = cpu
        elif e.name in ("sched_wakeup", "sched_wakeup_new"):
            wakeups.append((name_of[int(e.f["target_cpu"])], overutilized))
        elif e.name == "sched_overutilized":
            overutilized = int(e.f["overutilized"])
    for cpu, (pid, since) in running.items():
        if pid != 0:
            runtime[(pid, name_of[cpu])] += (end - since) / 1e9
    not_ou = [c for c, ou in wakeups if ou == 0]
    return {
        "runtime": dict(runtime),
        "migrations": {pid: tuple(m) for pid, m in moves.items()},
        "wakeups": len(wakeups),
        "little_share": sum(c == "little" for c, _ in wakeups) / len(wakeups) if wakeups else None,
        "known_not_overutilized": len(not_ou),
        "little_share_not_overutilized": sum(c == "little" for c in not_ou) / len(not_ou) if not_ou else None,
    }
