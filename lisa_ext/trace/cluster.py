"""Per-trace work in this process, or as Dask tasks on a local or remote cluster.

Each run of a campaign is analysed on its own (one ``trace.dat``, one
result), so runs are independent tasks. :func:`map_traces` runs a function
over trace paths either one after another in this process (the serial path)
or as ``dask.distributed`` tasks:

* on a local cluster of processes, one single-threaded worker per core
  (:func:`local_cluster`), or
* on an existing cluster given by its scheduler address (``tls://HOST:PORT``,
  or ``tcp://`` with a warning), whose workers read the traces from a path
  they all share with this machine.

A Dask scheduler runs whatever a connected client sends, on every worker, and
the client unpickles what comes back: whoever can connect runs code as the
user of the cluster. So the local cluster speaks TLS only, both ways
authenticated by a key and certificate made in memory for this one cluster
(``Security.temporary()``; the workers get them through the pipe that starts
them), listens on 127.0.0.1 only and serves no dashboard or HTTP route. A
remote ``tls://`` scheduler is reached with the certificates of Dask's
configuration (docs/dask.md); a plain ``tcp://`` one gets a warning.

Tasks carry only paths and a few options; each worker loads the trace itself
(:func:`lisa_ext.trace.load_trace`, so its parquet cache too) and sends back
small frames and dicts. Results come back in the order of the paths and are
the same objects, bit for bit, as the serial path gives: the same code runs
on the same bytes, and pandas frames pickle exactly.

Which path runs is :func:`choose_scheduler`'s decision: ``--scheduler`` /
:data:`SCHEDULER_ENV` when given, else serial below :data:`MIN_LOCAL_TASKS`
traces, else a local cluster. Users: ``lisa-ext analyse NAME --data DIR``
(:mod:`lisa_ext.analysis.campaign`) and the report
(:mod:`lisa_ext.report.build`). Importing this module is cheap (dask is
imported when a cluster is used), so commands that only register
``--scheduler`` stay fast.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager, nullcontext
from functools import partial
from typing import Callable, Sequence, TypeVar

from lisa_ext.errors import UserError

__all__ = [
    "LOCAL",
    "MIN_LOCAL_TASKS",
    "SCHEDULER_ENV",
    "SERIAL",
    "add_scheduler_argument",
    "choose_scheduler",
    "local_cluster",
    "map_traces",
]

#: environment variable naming the scheduler when ``--scheduler`` is not given
SCHEDULER_ENV = "LISA_EXT_DASK_SCHEDULER"
#: ``--scheduler`` values: run in this process / on a local cluster of processes
SERIAL = "none"
LOCAL = "local"
#: below this many traces the default is serial. Measured on the loaded 2-core
#: development machine (docs/dask.md, bench/dask_campaign.py): a local cluster
#: costs ~20 s to start and import LISA in its workers, and two workers save
#: 0.5-1.1 s of the ~2.9 s a 1.24 M-event trace costs the first time (and
#: nothing on a warm cache), so they pay back from ~20-40 runs.
MIN_LOCAL_TASKS = 24
#: the only interface the local cluster's scheduler, nannies and workers listen on
LOOPBACK = "127.0.0.1"
#: what Dask serves over HTTP on the scheduler and the workers even with no dashboard
#: (cluster and task information, Prometheus metrics): nothing, for the local cluster
_NO_HTTP_ROUTES = {"distributed.scheduler.http.routes": [], "distributed.worker.http.routes": []}

T = TypeVar("T")


def add_scheduler_argument(parser) -> None:
    """``--scheduler`` and ``--serial`` for a command that maps runs."""
    parser.add_argument(
        "--scheduler", metavar="ADDRESS",
        help=f"run the per-run trace work as Dask tasks on the cluster at ADDRESS "
             f"(tls://HOST:PORT, see docs/dask.md; workers must see the campaign at the same path), "
             f"'{LOCAL}' for a local cluster of one process per core, or '{SERIAL}' for "
             f"this process only (default: ${SCHEDULER_ENV}, else serial below "
             f"{MIN_LOCAL_TASKS} traces and a local cluster from there)")
    parser.add_argument("--serial", dest="scheduler", action="store_const", const=SERIAL,
                        help=f"same as --scheduler {SERIAL}")


def choose_scheduler(scheduler: str | None, n_tasks: int) -> str:
    """:data:`SERIAL`, :data:`LOCAL` or a scheduler address, from ``--scheduler``
    (``None`` when not given), then :data:`SCHEDULER_ENV`, then the task count."""
    chosen = scheduler or os.environ.get(SCHEDULER_ENV, "").strip() or None
    if chosen is None:
        return LOCAL if n_tasks >= MIN_LOCAL_TASKS and (os.cpu_count() or 1) > 1 else SERIAL
    if chosen.lower() in (SERIAL, "serial"):
        return SERIAL
    if chosen.lower() == LOCAL:
        return LOCAL
    if "://" not in chosen:
        source = "--scheduler" if scheduler else f"${SCHEDULER_ENV}"
        raise UserError(f"{source}: expected a Dask scheduler address such as "
                        f"tls://HOST:8786, '{LOCAL}' or '{SERIAL}', not {chosen!r}")
    return chosen


def _on_worker(func: Callable[[str], T], path: str) -> T:
    # a worker that does not see the campaign must fail loudly: a missing trace
    # would otherwise become an ordinary "trace not read" note in the results
    if not os.path.exists(path):
        import socket

        raise FileNotFoundError(f"{path}: not visible on Dask worker {socket.gethostname()} "
                                f"(runs must be on a path every worker shares)")
    return func(path)


@contextmanager
def local_cluster(n_workers: int | None = None):
    """A ``LocalCluster`` of ``n_workers`` (default: one per core) single-threaded worker
    processes that only this process can use: TLS with a key and certificate made for it
    (a peer without them cannot connect), on 127.0.0.1 only, no dashboard or HTTP route."""
    # deferred: dask.distributed costs ~1 s to import and the serial path never needs it
    import dask
    from distributed import LocalCluster
    from distributed.security import Security

    # the nannies copy the configuration into the workers they start
    with dask.config.set(_NO_HTTP_ROUTES):
        # ERROR: the nanny's "still alive, killing" warnings at close are routine
        # (a worker holding LISA's frames takes a few seconds to exit)
        cluster = LocalCluster(n_workers=n_workers or os.cpu_count() or 1, processes=True,
                               threads_per_worker=1, host=LOOPBACK, protocol="tls://",
                               security=Security.temporary(), dashboard_address=None,
                               # with no address the scheduler's HTTP server takes port 8787
                               scheduler_kwargs={"dashboard_address": f"{LOOPBACK}:0"},
                               silence_logs=logging.ERROR)
    try:
        yield cluster
    finally:
        cluster.close()


def _remote_security(scheduler: str):
    """Dask's configured TLS credentials for a ``tls://`` scheduler (None for another
    protocol, after a warning for plain ``tcp://``)."""
    from distributed.security import Security

    if not scheduler.startswith("tls://"):
        if scheduler.startswith("tcp://"):
            print(f"lisa-ext: warning: Dask scheduler {scheduler} is plain TCP: whoever can reach it "
                  f"runs code on its workers and feeds this process pickles (use tls://, see "
                  f"docs/dask.md)", file=sys.stderr)
        return None
    security = Security()
    missing = [name for name, value in (("ca-file", security.tls_ca_file),
                                        ("client.cert", security.tls_client_cert))
               if not value]
    if missing:
        raise UserError(f"Dask scheduler {scheduler}: no TLS {' or '.join(missing)} configured "
                        f"(DASK_DISTRIBUTED__COMM__TLS__CA_FILE, ..._CLIENT__CERT, ..._CLIENT__KEY; "
                        f"see docs/dask.md)")
    return security


@contextmanager
def _client(scheduler: str, cluster=None):
    from distributed import Client

    if scheduler == LOCAL:
        with nullcontext(cluster) if cluster is not None else local_cluster() as running, \
                Client(running) as client:
            yield client
        return
    security = _remote_security(scheduler)
    try:
        client = Client(scheduler, timeout="20s", security=security)
    except (OSError, TimeoutError) as exc:
        raise UserError(f"Dask scheduler {scheduler}: cannot connect ({exc})") from None
    with client:
        yield client


def map_traces(func: Callable[[str], T], paths: Sequence[str | os.PathLike], *,
               scheduler: str | None = None, cluster=None) -> list[T]:
    """``[func(path) for path in paths]``, serial or as one Dask task per path.

    :param func: a picklable callable (a module-level function or a
        :func:`functools.partial` of one); it runs on the workers, so it must
        take a path and return something small.
    :param scheduler: as ``--scheduler`` (see :func:`choose_scheduler`).
    :param cluster: a running :func:`local_cluster` to use instead (the benchmark
        times several maps on one).
    :raises UserError: when the scheduler cannot be reached or a worker cannot
        see a path; an exception raised by ``func`` itself is raised here.
    """
    chosen = LOCAL if cluster is not None else choose_scheduler(scheduler, len(paths))
    if chosen == SERIAL or not paths:
        return [func(str(p)) for p in paths]
    paths = [os.path.abspath(p) for p in paths]  # workers do not share our cwd
    with _client(chosen, cluster) as client:
        futures = client.map(partial(_on_worker, func), paths, pure=False)
        try:
            return client.gather(futures)
        except FileNotFoundError as exc:
            raise UserError(str(exc)) from None
