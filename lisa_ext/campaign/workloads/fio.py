"""fio: block I/O jobs described by fio options, measured from fio's JSON output.

Options are fio's own job options (``man fio``, "JOB PARAMETERS"), passed through as
given, e.g. RFC 001's ``{rw: randrw, bs: 32k, ioengine: libaio, iodepth: 64,
numjobs: 8, verify: sha512, direct: 1, size: 256M}``. They reach fio as a job file
(``fio.job``, kept in the run directory), never as command-line options: fio matches a
command-line option by any unambiguous prefix, so ``--serve`` or ``--exec_pre`` given
as "job options" would start a server or run a program; a job file knows job options
only, spelled out. The options that run programs (``exec_prerun``, ``exec_postrun``,
``ioengine: exec``, an engine loaded from a file) are refused, and so are values a job
file would read differently (``;`` and ``#`` start a comment, ``${VAR}`` is the
environment's, a line break starts another option). lisa-ext always adds
``--group_reporting``, so with ``numjobs`` > 1 the metrics cover all jobs
together; each job then gets its own data file (or, on dm-crypt, its own
``size``-long region of the device via ``offset_increment``) so that ``verify``
checks data no other job overwrote. The data file is laid out before tracing starts so the first run
does not trace the layout. Metrics come from ``fio --output-format=json``
(``jobs[0].read|write``): IOPS, bandwidth and completion-latency (``clat_ns``)
mean and percentiles.

Where fio writes is confined: a relative ``filename``, ``directory`` or ``filename_format``
is resolved under the fio scratch area of the target's working directory
(``<workdir>/lisa-ext-fio/``, where the default data file lives too), logs and I/O logs
under the run's directory; an absolute ``filename`` (or ``replay_redirect``, dm-crypt's
``backing``) must be a block device the target config declares as scratch (``lisa-ext:
scratch-devices``, the virtual board's ``/dev/vdc``). Anything else, ``..`` included, is
refused when the spec is read; before each run a target command checks that no symbolic
link leads a relative path out of the scratch area.

``dm-crypt: {backing: loop | /dev/..., size-mb, cipher, flags}`` runs the job on
a throw-away dm-crypt device (:mod:`~lisa_ext.campaign.workloads.dmcrypt`)
created before the run and removed after it, failure included.
"""

from __future__ import annotations

import json
import math
import os
import re

from lisa_ext.campaign import remote
from lisa_ext.schema import DURATION_S, THREADS, TIMEOUT_S, Field, Number, check_mapping, show
from lisa_ext.campaign.store.records import Metric
from lisa_ext.campaign.workloads.base import RunContext, Workload, WorkloadError
from lisa_ext.campaign.workloads.dmcrypt import CRYPT_SCHEMA, CryptDevice
from lisa_ext.errors import SpecError
from lisa_ext.target.config import device_problem

__all__ = ["Fio", "parse_fio_json", "read_fio_json", "runtime_s"]

_RESERVED = ("name", "output", "output-format", "output_format", "group_reporting")
#: job options that run a program on the target
_EXECUTING = ("exec_prerun", "exec_postrun")
#: a built-in engine (``fio --enghelp``); a path or ``external:`` would load a library
_ENGINE = re.compile(r"[a-z0-9_]+(-[a-z0-9_]+)*")
#: what a job file reads as something else than a value: a comment, the environment, a new line
_NOT_A_VALUE = re.compile(r"[;#\x00-\x1f\x7f]|\$\{")
#: job options naming files fio creates, writes or deletes (``man fio``), and what each may name:
#: ``data`` a path relative to the scratch area or a scratch device, ``relative`` a path relative
#: to the scratch area (data) or the run's directory (logs, I/O logs), ``device`` a scratch device;
#: each may list several, separated by ':'
_PATH_OPTIONS = {"filename": "data", "directory": "relative", "filename_format": "relative",
                 "write_iolog": "relative", "read_iolog": "relative", "write_bw_log": "relative",
                 "write_lat_log": "relative", "write_iops_log": "relative", "write_hist_log": "relative",
                 "cgroup": "relative", "replay_redirect": "device"}
#: job options refused outright: fio would open every file below a directory (``opendir``)
_REFUSED_PATHS = ("opendir",)
#: options whose value may name a file after a ':' (``mem=mmap:/path``, created and truncated) or
#: between single quotes (``buffer_pattern='file'``, read)
_MEMORY = ("mem", "iomem")
_PATTERNS = ("buffer_pattern", "verify_pattern")
#: fio time suffixes (``man fio``, "Time": seconds unless said otherwise)
_TIME_UNITS = {"us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3, "": 1.0, "s": 1.0, "sec": 1.0,
               "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_TIME = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,9})?)(" + "|".join(sorted(_TIME_UNITS, key=len, reverse=True)) + ")")
#: fio clat percentile key -> metric suffix
_PERCENTILES = {"50.000000": "p50", "90.000000": "p90", "99.000000": "p99", "99.900000": "p99_9"}


def parse_fio_json(data: dict) -> list[Metric]:
    """Metrics of the first job in fio's JSON output (one job with group_reporting)."""
    if not data.get("jobs"):
        raise WorkloadError("fio JSON output has no job")
    job = data["jobs"][0]
    if job.get("error"):
        raise WorkloadError(f"fio job reported error {job['error']}")
    metrics = []
    for direction in ("read", "write", "trim"):
        d = job.get(direction) or {}
        if not d.get("total_ios"):
            continue
        metrics.append(Metric(f"{direction}_iops", d["iops"], "IOPS", False))
        metrics.append(Metric(f"{direction}_bw", d["bw"], "KiB/s", False))
        clat = d.get("clat_ns") or {}
        if clat.get("N"):
            metrics.append(Metric(f"{direction}_clat_mean", clat["mean"] / 1e3, "us", True))
            for key, suffix in _PERCENTILES.items():
                value = (clat.get("percentile") or {}).get(key)
                if value is not None:
                    metrics.append(Metric(f"{direction}_clat_{suffix}", value / 1e3, "us", True))
    if not metrics:
        raise WorkloadError("fio completed no I/O")
    metrics.append(Metric("usr_cpu", job["usr_cpu"], "%", True))
    metrics.append(Metric("sys_cpu", job["sys_cpu"], "%", True))
    metrics.append(Metric("context_switches", job["ctx"], "count", True))
    return metrics


def read_fio_json(path) -> dict:
    """fio's JSON output file; fio may write notes (``fio: ...``) before the JSON object."""
    text = open(path, encoding="utf-8", errors="replace").read() if os.path.exists(path) else ""
    start = text.find("{")
    try:
        return json.loads(text[start:]) if start >= 0 else json.loads(text)
    except json.JSONDecodeError:
        raise WorkloadError(f"{path}: not fio JSON output: {text.strip()[:300]!r}") from None


def runtime_s(value) -> float | None:
    """Seconds of a fio ``runtime`` (a number of seconds, or with a unit: ``90s``, ``2m``,
    ``500ms``), or None when it is not one."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if math.isfinite(value) else None
    m = _TIME.fullmatch(str(value).strip())
    return float(m.group(1)) * _TIME_UNITS[m.group(2)] if m else None


def _numjobs(value) -> int | None:
    text = str(value).strip() if not isinstance(value, bool) else ""
    return int(text) if re.fullmatch(r"[0-9]{1,5}", text) else None


def _option_problem(key: str, value) -> str | None:
    """What is wrong with one fio option of a spec, or None."""
    if key in _RESERVED:
        return f"set by lisa-ext itself; do not use: {', '.join(_RESERVED)}"
    if key in _EXECUTING:
        return "runs a program on the target; a campaign spec may not"
    if not isinstance(value, (str, int, float)):  # booleans are ints: fio reads them as 0 and 1
        return f"expected a string or a number, got {show(value)}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"expected a finite number, got {show(value)}"
    if isinstance(value, str) and (len(value) > 4096 or _NOT_A_VALUE.search(value)):
        return (f"{show(value)}: a fio value may not hold ';', '#', '${{', a line break or another "
                "control character (a job file reads them as comments, the environment or a new "
                "option), nor be longer than 4096 characters")
    if key == "ioengine" and (not _ENGINE.fullmatch(str(value)) or value == "exec"):
        return (f"{show(value)} is not allowed: name one of fio's built-in engines (fio --enghelp), "
                "not exec, a library path or external:")
    if key == "numjobs" and not 1 <= (_numjobs(value) or 0) <= THREADS[1]:
        return f"expected an integer from 1 to {THREADS[1]} (jobs fio runs at once), got {show(value)}"
    if key == "runtime" and not 0 < (runtime_s(value) or 0) <= DURATION_S[1]:
        return (f"expected a time up to {DURATION_S[1]} s (seconds, or a number with us, ms, s, "
                f"m, h or d), got {show(value)}")
    return None


def _components(value) -> list[str]:
    """The paths of a fio path option (fio separates several with ':')."""
    return str(value).split(":")


def _relative_problem(path: str, devices: bool = False) -> str | None:
    if not path:
        return "an empty path"
    if path.startswith("/"):
        return (f"{path} is outside the run's scratch area: name a path relative to it (fio's files go to "
                "<workdir>/lisa-ext-fio/, its logs to the run's directory on the target)"
                + (" or a block device the target config declares in lisa-ext: scratch-devices" if devices else ""))
    if ".." in path.split("/"):
        return f"{path}: '..' would leave the run's scratch area"
    return None


def _path_problem(key: str, value) -> str | None:
    """What is wrong with where a fio option makes fio write (see :data:`_PATH_OPTIONS`), or None."""
    if key in _REFUSED_PATHS:
        return "fio would open every file below that directory; name files with filename"
    if key in _PATTERNS:
        return ("a pattern read from a file ('name') is not allowed: give the bytes (0x..., \"text\", a number)"
                if "'" in str(value) else None)
    if key in _MEMORY:
        _, sep, path = str(value).partition(":")
        return _relative_problem(path) if sep else None
    kind = _PATH_OPTIONS.get(key)
    if kind is None:
        return None
    if "\\" in str(value):
        return "a '\\' (fio's escape of ':') is not allowed in a path"
    for path in _components(value):
        if kind != "relative" and path.startswith("/dev/"):
            problem = device_problem(path)
        elif kind == "device":
            problem = f"{path}: expected a block device the target config declares in lisa-ext: scratch-devices"
        else:
            problem = _relative_problem(path, devices=kind == "data")
        if problem:
            return problem
    return None


def _devices(options: dict) -> list[tuple[str, str]]:
    """(key, device) of every block device a workload's options name: the scratch devices it writes."""
    fio = options.get("options") or {}
    named = [(f"options.{key}", path) for key in ("filename", "replay_redirect") if key in fio
             for path in _components(fio[key]) if path.startswith("/")]
    backing = (options.get("dm-crypt") or {}).get("backing", "loop")
    return named + ([("dm-crypt.backing", backing)] if backing != "loop" else [])


def _job_value(value) -> str:
    return str(int(value) if isinstance(value, bool) else value)


class Fio(Workload):
    KIND = "fio"
    TOOLS = ("fio",)
    SCHEMA = {
        "options": Field((dict,), "fio options as key: value, e.g. rw: randread, bs: 4k", True),
        "timeout-s": Field(Number, "kill fio after this many seconds (default: 10 x runtime + 60)",
                           bounds=TIMEOUT_S),
        "dm-crypt": Field((dict,), "run on a throw-away dm-crypt device: {backing: loop or /dev/..., "
                          "size-mb, cipher, key-bytes, flags}"),
    }

    def __init__(self, name: str, options: dict):
        super().__init__(name, options)
        if "dm-crypt" in options:
            self.TOOLS = ("fio", "dmsetup", "losetup", "blockdev")

    @classmethod
    def check_options(cls, path, prefix, options):
        fio = options["options"]
        for key, value in fio.items():
            where = f"{prefix}.options.{key}"
            if not re.fullmatch(r"[a-z0-9_]{1,64}", str(key)):
                raise SpecError(path, where, "not a fio option name (lower-case letters, digits, _)")
            problem = _option_problem(key, value)
            if problem:
                raise SpecError(path, where, problem)
        if "dm-crypt" in options:
            check_mapping(path, options["dm-crypt"], f"{prefix}.dm-crypt", CRYPT_SCHEMA)
            for key in ("filename", "directory", "filename_format"):
                if key in fio:
                    raise SpecError(path, f"{prefix}.options.{key}",
                                    "not allowed with dm-crypt (fio runs on the dm-crypt device)")
        for key, value in fio.items():
            problem = _path_problem(key, value)
            if problem:
                raise SpecError(path, f"{prefix}.options.{key}", problem)
        if "filename" in fio and any(p.startswith("/") for p in _components(fio["filename"])):
            for key in ("directory", "filename_format"):
                if key in fio:
                    raise SpecError(path, f"{prefix}.options.{key}", "not allowed with a device as filename "
                                    "(fio would put the device's path under the directory)")
            if any(not p.startswith("/") for p in _components(fio["filename"])):
                raise SpecError(path, f"{prefix}.options.filename", "either devices or files of the scratch "
                                "area, not both")

    @classmethod
    def check_target(cls, path, prefix, options, config):
        for key, device in _devices(options):
            target = config()
            if device not in target.scratch_devices:
                listed = ", ".join(target.scratch_devices) or "none"
                raise SpecError(path, f"{prefix}.{key}", f"{device} is not a scratch device of {target.path} "
                                f"(its lisa-ext: scratch-devices lists {listed}): a workload destroys the data "
                                "of a device, so it may write only a device the target config declares as scratch")

    def job_file(self, ctx: RunContext) -> str:
        """The fio job file of one run: the spec's options, plus where the data goes."""
        opts = dict(self.options["options"])
        device = getattr(self, "_device", None)
        several = (_numjobs(opts.get("numjobs", 1)) or 1) > 1
        if device is not None:
            opts["filename"] = device.path
            if several and "size" in opts and "offset_increment" not in opts:
                # each job its own region of the device: verify fails when jobs overwrite each other
                opts["offset_increment"] = opts["size"]
        elif not any(key in opts for key in ("filename", "directory", "filename_format")):
            if several:
                # fio names each job's file <name>.<job>.0 in the directory: one file per job
                opts["directory"] = self._scratch(ctx.target)
            else:
                opts["filename"] = self._default_file(ctx.target)
        elif not self._uses_devices():
            # fio puts every file name under the directory: the spec's names land in the scratch area
            opts["directory"] = ":".join(self._scratch_paths(ctx.target))
        for key in ("filename", "directory"):
            if _NOT_A_VALUE.search(str(opts.get(key, ""))):  # the target's working directory
                raise WorkloadError(f"fio {key} {opts[key]!r}: a job file would read part of it as a "
                                    "comment, the environment or another option")
        return "".join([f"[{self.name}]\n"] + [f"{k}={_job_value(v)}\n" for k, v in opts.items()])

    def _scratch(self, target) -> str:
        """The directory of fio's files on the target: the default data file, the spec's relative names."""
        return target.path.join(target.working_directory, "lisa-ext-fio")

    def _default_file(self, target) -> str:
        return target.path.join(self._scratch(target), f"{self.name}.data")

    def _uses_devices(self) -> bool:
        return any(p.startswith("/") for p in _components(self.options["options"].get("filename", "")))

    def _scratch_paths(self, target) -> list[str]:
        """The spec's directories, under the scratch area (the area itself without one)."""
        directory = self.options["options"].get("directory")
        scratch = self._scratch(target)
        return [target.path.join(scratch, d) for d in _components(directory)] if directory else [scratch]

    def _check_confined(self, target) -> None:
        """Refuse to run when a symbolic link on the target leads the spec's relative paths out of
        the scratch area, or a scratch device is not a block device (fio would create a file)."""
        q = remote.quote
        if self._uses_devices():
            devices = _components(self.options["options"]["filename"])
            out = target.execute("for d in " + " ".join(map(q, devices)) + '; do [ -b "$d" ] || echo "$d"; done',
                                 as_root=True, check_exit_code=False)
            if out.strip():
                raise WorkloadError(f"fio filename {out.split()[0]} is not a block device on the target: "
                                    "refusing to run (fio would create a file there)")
            return
        scratch = self._scratch(target)
        dirs = self._scratch_paths(target)
        names = [target.path.join(dirs[0], f) for f in _components(self.options["options"].get("filename", ""))
                 if f]
        out = target.execute(f"if s=$(realpath -e -- {q(scratch)}) && [ ! -L {q(scratch)} ]; then "
                             "for p in " + " ".join(map(q, dirs + names)) + "; do "
                             'r=$(realpath -m -- "$p") && case "$r/" in "$s"/*) ;; *) false;; esac || echo "$p"; '
                             f"done; else echo {q(scratch)}; fi", as_root=True, check_exit_code=False)
        if out.strip():
            raise WorkloadError(f"fio path {out.splitlines()[0]} leads outside the scratch area {scratch} "
                                "(a symbolic link?): refusing to run")

    def _timeout(self) -> float:
        if "timeout-s" in self.options:
            return float(self.options["timeout-s"])
        return 10 * (runtime_s(self.options["options"].get("runtime", 60)) or 60) + 60

    def prepare(self, ctx: RunContext) -> None:
        target = ctx.target
        if "dm-crypt" in self.options:
            scratch = target.path.join(target.working_directory, "lisa-ext-fio")
            self._device = CryptDevice(target, f"lisa-ext-{self.name}", self.options["dm-crypt"], scratch)
            self._device.create(ctx)
        else:
            target.execute(f"mkdir -p {remote.quote(self._scratch(target))}")
            self._check_confined(target)
        job = ctx.local_dir / "fio.job"
        job.write_text(self.job_file(ctx))
        target.push(str(job), target.path.join(ctx.remote_dir, "fio.job"))
        # lay the data file out now, so that no run traces the layout
        # in the run directory: fio leaves files in its working directory (verify state)
        out = target.execute(f"cd {remote.quote(ctx.remote_dir)} && fio --create_only=1 fio.job 2>&1; "
                             "echo \"rc=$?\"",
                             check_exit_code=False, timeout=600)
        output, _, status = out.rstrip().rpartition("\n")
        if status != "rc=0":
            raise WorkloadError("fio could not lay out its data file: " + _tail(output))

    def run(self, ctx: RunContext) -> list[Metric]:
        target = ctx.target
        d = remote.quote(ctx.remote_dir)
        command = (f"cd {d} && fio --output-format=json --output=fio.json --group_reporting fio.job "
                   ">fio.stdout 2>fio.stderr")
        bg = remote.start(target, command, on_pid=ctx.on_pid)
        rc = remote.wait(target, bg, self._timeout(), "fio")
        for name in ("fio.json", "fio.stdout", "fio.stderr"):
            src = target.path.join(ctx.remote_dir, name)
            if target.file_exists(src):
                target.pull(src, str(ctx.local_dir / name))
        if rc != 0:
            stderr = (ctx.local_dir / "fio.stderr")
            text = stderr.read_text(errors="replace") if stderr.exists() else ""
            raise WorkloadError(f"fio exited with status {rc}: {_tail(text)}")
        return parse_fio_json(read_fio_json(ctx.local_dir / "fio.json"))

    def cleanup(self, ctx: RunContext) -> None:
        device = getattr(self, "_device", None)
        if device is not None:
            device.remove()
            self._device = None


def _tail(text: str, lines: int = 3) -> str:
    """fio's own error lines ("fio: ...", "...err=...", "Bad option <...>"), else the last lines
    of its output."""
    all_lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in all_lines if line.startswith(("fio:", "Bad option")) or "err=" in line]
    return " | ".join((errors or all_lines)[-lines:]) or "(no output)"
