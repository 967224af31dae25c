"""Campaign analysis on Dask: 1 worker vs 2 workers, speed-up printed.

Builds a throw-away campaign outside the repository (under the system temp
directory, removed at the end) through the store's own writer: RUNS run
directories whose ``trace.dat`` is a symlink to one real 1.24 M-event trace
(default ``../shared/traces/local/fio_randread_2cpu_v7.dat``: fio randread on
this 2-vCPU machine, sched_switch/wakeup, block and workqueue events). Then it
times the report's per-run trace work (:func:`lisa_ext.report.traces.collect_file`
through :func:`lisa_ext.trace.cluster.map_traces`, what ``lisa-ext report``
runs) on a local cluster of 1 and of 2 single-threaded worker processes, and
in this process (serial), and prints medians of --repeat runs.

Conditions, so the figures mean what they say: the runs all link one file,
so they would share one content-keyed trace cache entry (and LISA's swap
files in it), which no real campaign does. By default each task therefore
converts its trace into a fresh cache directory of its own, removed after
the task: the per-run cost of a campaign analysed for the first time. With
``--warm`` each worker process (and this process) has its own cache instead,
filled before timing: the cost of re-analysing. Either way each cluster is
started and its workers have imported LISA before timing; the cost of a cold
one-off ``--scheduler local`` (start, imports, conversion) is printed
separately. The load average is printed before and after. Run::

    .venv/bin/python bench/dask_campaign.py [--runs 20] [--repeat 3] [--workers 1,2] [--smoke]

``--workers 1,2,4`` adds a 4-worker cluster (local processes: on 2 cores it shows the
overhead, not what 4 machines would give; see docs/dask.md). ``--smoke`` (what ``make
test`` runs so that the benchmark cannot rot): 2 runs of the committed sample's small
trace, one repeat, no serial or cold timing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path

from lisa_ext.trace.cluster import SERIAL, local_cluster, map_traces
from lisa_ext.campaign.store.records import RunKey, RunResult
from lisa_ext.campaign.store.writer import CampaignStore
from lisa_ext.report.traces import collect_file

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO.parent / "shared" / "traces" / "local" / "fio_randread_2cpu_v7.dat"
SMOKE_TRACE = REPO / "data" / "samples" / "wq-affinity" / "runs" / "cache" / "fio-randread" / "0" / "trace.dat"
#: events in TRACE (``trace-cmd report`` line count, from the shared traces' MANIFEST.md)
TRACE_EVENTS = 1_239_576


def make_campaign(root: Path, trace: Path, runs: int) -> list[Path]:
    """``runs`` runs over two variants, each linking ``trace``; their trace paths."""
    store = CampaignStore(root)
    paths = []
    for i in range(runs):
        key = RunKey("variant-a" if i % 2 == 0 else "variant-b", "fio-randread", i // 2)
        tmp = store.scratch(key)
        (tmp / "trace.dat").symlink_to(trace.resolve())
        result = RunResult("dask-bench", key.variant, key.workload, key.iteration, "ok", None, [])
        paths.append(store.publish(key, {"bench": {"trace_source": str(trace.resolve())}}, result, tmp)
                     / "trace.dat")
    return paths


def _own_cache(path: str, cache_root: str, dask_worker=None) -> None:
    """Point this process at its own trace cache and fill it (``client.run`` passes
    ``dask_worker``; this process calls it without)."""
    name = f"worker-{dask_worker.name}" if dask_worker is not None else "client"
    os.environ["LISA_EXT_CACHE"] = os.path.join(cache_root, name)
    collect_file(path)


def cold_collect(path: str, cache_root: str) -> tuple:
    """The report's per-run work on a trace never seen before: a fresh trace
    cache for this one task (copies of one trace would share an entry),
    removed afterwards."""
    own = os.path.join(cache_root, uuid.uuid4().hex)
    os.environ["LISA_EXT_CACHE"] = own
    try:
        return collect_file(path)
    finally:
        shutil.rmtree(own, ignore_errors=True)


def _cpu_seconds(workers: set[int]) -> tuple[float, float, float]:
    """CPU seconds (user + system) so far of this process (the client and, in a local
    cluster, the scheduler), of the worker processes ``workers`` and of every other
    descendant (the workers' nannies)."""
    import psutil

    def spent(proc) -> float:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            return 0.0
        return times.user + times.system

    here = psutil.Process()
    children = here.children(recursive=True)
    return (spent(here), sum(spent(c) for c in children if c.pid in workers),
            sum(spent(c) for c in children if c.pid not in workers))


def _time(func, repeat: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--warm", action="store_true",
                        help="time runs on a warm trace cache (default: every run converts its "
                             "trace afresh, as for a campaign analysed the first time)")
    parser.add_argument("--no-serial", dest="serial", action="store_false",
                        help="skip the in-process timing")
    parser.add_argument("--workers", default="1,2",
                        help="cluster sizes to time, comma separated (default 1,2)")
    parser.add_argument("--smoke", action="store_true",
                        help="2 runs of a small trace, one repeat, no serial or cold timing")
    args = parser.parse_args()
    sizes = [int(n) for n in args.workers.split(",") if n]
    if args.smoke:
        args.runs, args.repeat, args.serial, sizes = 2, 1, False, [1]
        if args.trace == TRACE:
            args.trace = SMOKE_TRACE
    if not args.trace.is_file():
        sys.exit(f"{args.trace}: no such trace")
    from distributed import Client

    root = Path(tempfile.mkdtemp(prefix="lisa-ext-dask-bench-"))
    try:
        paths = make_campaign(root, args.trace, args.runs)
        print(f"campaign {root}: {len(paths)} runs -> {args.trace} "
              f"({args.trace.stat().st_size / 1e6:.1f} MB, {TRACE_EVENTS / 1e6:.2f} M events "
              f"when it is the default trace); {os.cpu_count()} CPUs")
        if not args.smoke:
            _own_cache(str(paths[0]), str(root / "cache"))
            reference = map_traces(collect_file, paths[:1], scheduler=SERIAL)
            print(f"per run: {len(reference[0][0].metrics)} metrics, frames "
                  + ", ".join(f"{k} {len(v)}" for k, v in reference[0][0].frames.items()))
        task = collect_file if args.warm else partial(cold_collect, cache_root=str(root / "cache"))
        print("trace cache:", "warm, one per process" if args.warm else "fresh for every run")
        print(f"load average before: {os.getloadavg()[0]:.1f}")
        medians = {}
        for workers in sizes:
            with local_cluster(workers) as cluster, Client(cluster) as client:
                client.run(_own_cache, str(paths[0]), str(root / "cache"))
                pids = set(client.run(os.getpid).values())
                before = _cpu_seconds(pids)
                medians[workers], times = _time(
                    lambda: map_traces(task, paths, cluster=cluster),
                    args.repeat)
                spent = [(b - a) / args.repeat for a, b in zip(before, _cpu_seconds(pids))]
            print(f"{workers} worker{'s' if workers > 1 else ''}: median {medians[workers]:.1f} s "
                  f"({', '.join(f'{t:.1f}' for t in times)}), "
                  f"{len(paths) / medians[workers]:.2f} runs/s")
            # where the cores went: what the workers did parallelises, what this process
            # (client and scheduler) and the nannies did takes a core from them once they fill all
            print(f"  CPU per repeat: workers {spent[1]:.1f} s, client and scheduler {spent[0]:.1f} s, "
                  f"nannies {spent[2]:.1f} s; {os.cpu_count()} CPUs x {statistics.mean(times):.1f} s "
                  f"= {(os.cpu_count() or 1) * statistics.mean(times):.1f} s")
        for workers in sizes[1:]:
            print(f"speed-up {workers} workers vs {sizes[0]}: "
                  f"{medians[sizes[0]] / medians[workers]:.2f}x")
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        if args.smoke:
            return 0
        if args.serial:
            serial, times = _time(lambda: map_traces(task, paths, scheduler=SERIAL), 1)
            print(f"serial in this process: {serial:.1f} s")
        os.environ["LISA_EXT_CACHE"] = str(root / "cache" / "cold")  # inherited by the workers
        start = time.perf_counter()
        map_traces(collect_file, paths, scheduler="local")
        print(f"cold --scheduler local (start {os.cpu_count()} workers, imports, empty cache): "
              f"{time.perf_counter() - start:.1f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
