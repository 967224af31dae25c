"""pgbench against a throw-away PostgreSQL cluster created for each run (RFC 004, mmtests pgbench).

Per run, on the target and outside the traced window: a fresh cluster in a new
scratch directory (``mktemp -d /tmp/lisa-ext-pg.XXXXXX``; ``initdb`` on the target's
first run, a copy of that run's initdb output afterwards), ``postgres`` started
on a private unix-socket directory with TCP listening off
(``listen_addresses=''``), ``pgbench -i -s SCALE``; the traced run is then
``pgbench`` with the spec's options over that socket. Afterwards (failure
included) the server gets a fast shutdown (SIGINT, SIGKILL after a grace
period) and the scratch directory is removed.

PostgreSQL refuses to run as root, so initdb, postgres and pgbench run as the
unprivileged ``postgres`` user that Debian's postgresql package creates
(``runuser -u postgres --``); the ``user`` option names another one. The
server's binaries are found in ``/usr/lib/postgresql/<version>/bin`` (newest
version), or on PATH.

If the runner is SIGKILLed, its recovery runs the cleanup command registered
with :attr:`RunContext.on_cleanup` before the server started: it kills the
postmaster named in ``postmaster.pid`` and removes the scratch directory.

Metrics from pgbench's report: ``tps`` (without initial connection time),
``latency_avg``/``latency_stddev`` (ms), ``transactions``, ``failed``, and
with ``rate`` / ``latency-limit-ms`` also ``skipped``, ``late`` and the rate
limit schedule lag.
"""

from __future__ import annotations

import math
import re
import signal
import time

from lisa_ext.campaign import remote
from lisa_ext.schema import DURATION_S, THREADS, TIMEOUT_S, Field, Number
from lisa_ext.campaign.store.records import Metric
from lisa_ext.campaign.workloads.base import RunContext, Workload, WorkloadError
from lisa_ext.campaign.workloads.command import run_logged, tail
from lisa_ext.errors import SpecError, UserError

__all__ = ["Pgbench", "parse_pgbench", "postgres_bindir"]

_PORT = 5432
#: a unix socket's path holds 107 bytes, the server adds "/.s.PGSQL.5432"; a comma would
#: make PostgreSQL's unix_socket_directories a list
_SOCKET_DIR = re.compile(r"/[A-Za-z0-9_./-]{0,79}")
#: server settings that run a shell command, load a shared library or relocate the server's files
#: (PostgreSQL's "Write Ahead Log: Archiving / Recovery", "Shared Library Preloading", "File Locations")
_EXECUTING_SETTINGS = ("archive_command", "archive_library", "restore_command", "archive_cleanup_command",
                       "recovery_end_command", "ssl_passphrase_command", "shared_preload_libraries",
                       "local_preload_libraries", "session_preload_libraries", "dynamic_library_path",
                       "jit_provider", "data_directory", "config_file", "hba_file", "ident_file",
                       "external_pid_file")
#: pgbench report line -> metric name, unit, lower_is_better
_LINES = (
    (r"^number of transactions actually processed: (\d+)", "transactions", "count", False),
    (r"^number of failed transactions: (\d+)", "failed", "count", True),
    (r"^number of transactions skipped: (\d+)", "skipped", "count", True),
    (r"^number of transactions above the [0-9.]+ ms latency limit: (\d+)", "late", "count", True),
    (r"^latency average = ([0-9.]+) ms", "latency_avg", "ms", True),
    (r"^latency stddev = ([0-9.]+) ms", "latency_stddev", "ms", True),
    (r"^rate limit schedule lag: avg ([0-9.]+)", "lag_avg", "ms", True),
    (r"^rate limit schedule lag: avg [0-9.]+ \(max ([0-9.]+)\)", "lag_max", "ms", True),
    (r"^initial connection time = ([0-9.]+) ms", "connection_time", "ms", True),
    (r"^tps = ([0-9.]+) \(without initial connection time\)", "tps", "transactions/s", False),
)


def parse_pgbench(text: str) -> list[Metric]:
    """Metrics from pgbench's final report (see the module docstring)."""
    metrics = []
    for pattern, name, unit, lower in _LINES:
        m = re.search(pattern, text, re.M)
        if m:
            metrics.append(Metric(name, float(m.group(1)), unit, lower))
    if not any(m.name == "tps" for m in metrics):
        if any(m.name == "transactions" and m.value == 0 for m in metrics):
            # pgbench's -T clock starts before its clients connect: 44 connections take ~2-5 s
            # on the TCG board, and a short run can end before the first transaction
            raise WorkloadError("pgbench completed no transaction within duration-s (its clock "
                                "includes connecting every client): raise duration-s")
        raise WorkloadError(f"pgbench printed no 'tps = ...' line: {tail(text)}")
    return metrics


def postgres_bindir(target) -> str:
    """Directory holding initdb and postgres on the target; UserError when there is none."""
    out = target.execute(
        "for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do "
        "[ -x $d/initdb ] && [ -x $d/postgres ] && echo $d && exit 0; done; "
        "p=$(command -v initdb) && [ -x $(dirname $p)/postgres ] && dirname $p", check_exit_code=False).strip()
    if not out:
        raise UserError("pgbench workload: PostgreSQL's initdb/postgres are not installed on the target "
                        "(on Debian: apt-get install postgresql, or bash scripts/install-system-packages.sh)")
    return out.splitlines()[0]



def _check_settings(value: dict) -> str | None:
    for key, v in value.items():
        if (not re.fullmatch(r"[a-z_.]{1,64}", str(key)) or not isinstance(v, (str, int, float))
                or isinstance(v, bool) or (isinstance(v, float) and not math.isfinite(v))):
            return f"{key!r}: expected a PostgreSQL setting name with a string or finite number value"
        if key in ("listen_addresses", "port", "unix_socket_directories"):
            return f"{key} is set by lisa-ext itself (private socket, no TCP)"
        if key in _EXECUTING_SETTINGS:
            return f"{key} runs a command, loads a library or moves the server's files; a campaign spec may not set it"
    return None


class Pgbench(Workload):
    KIND = "pgbench"
    TOOLS = ("pgbench", "runuser")
    SCHEMA = {
        "duration-s": Field((int,), "seconds the benchmark runs (-T); this or transactions", bounds=DURATION_S),
        "transactions": Field((int,), "transactions each client runs (-t), in place of duration-s: a run "
                              "as long as its work (on the virtual board a busy guest second costs "
                              "20-60 s of host time)", bounds=(1, 100_000_000)),
        "clients": Field((int,), "concurrent client sessions (-c, default 1)", bounds=(1, 10_000)),
        "threads": Field((int,), "pgbench worker threads (-j, default 1)", bounds=THREADS),
        "scale": Field((int,), "scale factor of pgbench -i (default 1, 100000 rows or 15 MB per unit)",
                       bounds=(1, 10_000)),
        "select-only": Field((bool,), "built-in select-only script (-S)"),
        "no-vacuum": Field((bool,), "skip vacuuming before the run (-n)"),
        "rate": Field(Number, "target transactions per second over all clients (-R)",
                      bounds=(0.01, 10_000_000)),
        "latency-limit-ms": Field(Number, "count transactions above this latency as late (-L)",
                                  bounds=(0.01, 3_600_000)),
        "server-settings": Field((dict,), "postgres settings passed as -c key=value",
                                 check=_check_settings),
        "socket-dir": Field((str,), "absolute path of the directory for the server's unix socket "
                            "(default: a private one in the scratch directory)",
                            check=lambda v: None if _SOCKET_DIR.fullmatch(v) else
                            "expected an absolute path of letters, digits, '_', '.', '-' and '/', "
                            "at most 80 characters (a unix socket path is short)"),
        "user": Field((str,), "unprivileged user running the server and pgbench (default postgres)",
                      check=lambda v: None if re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", v) else "not a user name"),
        "timeout-s": Field(Number, "kill pgbench after this many seconds (default: 3 x duration + 120, "
                           "or 600 with transactions)", bounds=TIMEOUT_S),
    }

    @classmethod
    def check_options(cls, path, prefix, options):
        if ("duration-s" in options) == ("transactions" in options):
            raise SpecError(path, f"{prefix}.duration-s",
                            "expected exactly one of duration-s (-T) and transactions (-t)"
                            + ("" if "duration-s" in options else ": neither is set"))

    def _as_user(self, command: str) -> str:
        return f"runuser -u {remote.quote(self.options.get('user', 'postgres'))} -- {command}"

    def pgbench_args(self) -> str:
        o = self.options
        length = f"-T {int(o['duration-s'])}" if "duration-s" in o else f"-t {int(o['transactions'])}"
        args = [length, f"-c {int(o.get('clients', 1))}", f"-j {int(o.get('threads', 1))}"]
        if o.get("select-only"):
            args.append("-S")
        if o.get("no-vacuum"):
            args.append("-n")
        if "rate" in o:
            args.append(f"-R {o['rate']}")
        if "latency-limit-ms" in o:
            args.append(f"-L {o['latency-limit-ms']}")
        return " ".join(args)

    def setup_campaign(self, target, state: dict) -> None:
        postgres_bindir(target)

    def prepare(self, ctx: RunContext) -> None:
        target = ctx.target
        bindir = postgres_bindir(target)
        user = self.options.get("user", "postgres")
        scratch = target.execute("mktemp -d /tmp/lisa-ext-pg.XXXXXX", as_root=True).strip()
        self._scratch = scratch
        pidfile = f"{scratch}/data/postmaster.pid"
        ctx.on_cleanup(f"[ -f {pidfile} ] && kill -9 $(head -1 {pidfile}) 2>/dev/null; rm -rf {scratch}")
        sock = self.options.get("socket-dir", f"{scratch}/sock")
        self._socket = sock
        q = remote.quote
        target.execute(f"mkdir -p {q(sock)} && chown {q(user)} {q(scratch)} {q(sock)}", as_root=True)
        self._initdb(ctx, bindir, user, scratch)
        settings = dict(self.options.get("server-settings", {}))
        settings.update({"listen_addresses": "", "unix_socket_directories": sock, "port": _PORT})
        conf = " ".join(q(f"-c{k}={v}") for k, v in settings.items())
        self._server = remote.start(
            target, self._as_user(f"{bindir}/postgres -D {scratch}/data {conf}") + f" >{scratch}/server.log 2>&1",
            as_root=True, on_pid=ctx.on_pid)
        self._wait_ready(ctx, pidfile, f"{scratch}/server.log")
        init = target.execute(self._as_user(f"pgbench -h {q(sock)} -p {_PORT} -i -s "
                                            f"{int(self.options.get('scale', 1))} -q postgres 2>&1; echo rc=$?"),
                              as_root=True, timeout=1800)
        (ctx.local_dir / "pgbench-init.log").write_text(init)
        if not init.rstrip().endswith("rc=0"):
            raise WorkloadError(f"pgbench -i failed: {tail(init.rstrip().rpartition(chr(10))[0])}")

    def _initdb(self, ctx: RunContext, bindir: str, user: str, scratch: str) -> None:
        """A fresh cluster in ``scratch/data``: a copy of the target's initdb output, made on first use.

        initdb takes ~18 s on the TCG board against ~1 s for copying its 39 MB result, and its
        output depends on the PostgreSQL major version only (in ``bindir``), so every run starts
        from the same files. They are kept in /var/tmp, which outlives a reboot: a study whose
        variants are kernels reboots before each one.
        """
        q = remote.quote
        template = q(f"/var/tmp/lisa-ext-pg-initdb.{user}.{bindir.strip('/').replace('/', '_')}")
        data = q(f"{scratch}/data")
        copied = ctx.target.execute(f"[ -f {template}/data/PG_VERSION ] && cp -a {template}/data {data} "
                                    f"&& echo copied || true", as_root=True, timeout=300).strip()
        if copied == "copied":
            (ctx.local_dir / "initdb.log").write_text(f"copied from {template}\n")
            return
        out = ctx.target.execute(self._as_user(f"{bindir}/initdb -D {data} -A trust -U postgres "
                                               f"--no-sync 2>&1; echo rc=$?"), as_root=True, timeout=300)
        (ctx.local_dir / "initdb.log").write_text(out)
        if not out.rstrip().endswith("rc=0"):
            raise WorkloadError(f"initdb failed: {tail(out.rstrip().rpartition(chr(10))[0])}")
        # published with one rename, so a run never copies a half-written template
        ctx.target.execute(f"t=$(mktemp -d {template}.XXXXXX) && cp -a {data} $t/data && "
                           f"(mv -T $t {template} 2>/dev/null || rm -rf $t)", as_root=True,
                           check_exit_code=False, timeout=300)

    def _wait_ready(self, ctx: RunContext, pidfile: str, log: str, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._server.poll() is not None:
                text = ctx.target.execute(f"cat {log}", as_root=True, check_exit_code=False)
                raise WorkloadError(f"the PostgreSQL server did not start: {tail(text)}")
            status = ctx.target.execute(f"sed -n 8p {pidfile} 2>/dev/null", as_root=True,
                                        check_exit_code=False).strip()
            if status == "ready":
                return
            time.sleep(0.2)
        raise WorkloadError(f"the PostgreSQL server was not ready after {timeout_s:.0f} s")

    def run(self, ctx: RunContext) -> list[Metric]:
        # the remote run directory belongs to root; pgbench's report comes back over stdout
        command = self._as_user(f"pgbench -h {remote.quote(self._socket)} -p {_PORT} "
                                f"{self.pgbench_args()} postgres")
        default = 3 * self.options["duration-s"] + 120 if "duration-s" in self.options else 600
        timeout = float(self.options.get("timeout-s", default))
        stdout, _ = run_logged(ctx, command, "pgbench", timeout, "pgbench")
        return parse_pgbench(stdout)

    def cleanup(self, ctx: RunContext) -> None:
        target = ctx.target
        server = getattr(self, "_server", None)
        scratch = getattr(self, "_scratch", None)
        if server is not None:
            # SIGINT to the postmaster: "fast" shutdown, it stops its backends itself
            target.execute(f"kill -INT $(head -1 {scratch}/data/postmaster.pid) 2>/dev/null",
                           as_root=True, check_exit_code=False)
            if remote.stop(target, server, signal.SIGINT, grace_s=30) == -signal.SIGKILL:
                target.execute(f"kill -9 $(head -1 {scratch}/data/postmaster.pid) 2>/dev/null",
                               as_root=True, check_exit_code=False)
        if scratch is not None:
            log = f"{scratch}/server.log"
            if target.file_exists(log):
                target.pull(log, str(ctx.local_dir / "postgres-server.log"), as_root=True)
            target.execute(f"rm -rf {remote.quote(scratch)}", as_root=True, check_exit_code=False)
        self._server = self._scratch = None
