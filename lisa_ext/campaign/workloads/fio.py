"""fio: block I/O jobs described by fio options, measured from fio's JSON output.

Options are fio's own command-line options (``man fio``), passed through as
given, e.g. RFC 001's ``{rw: randrw, bs: 32k, ioengine: libaio, iodepth: 64,
numjobs: 8, verify: sha512, direct: 1, size: 256M}``. lisa-ext always adds
``--group_reporting``, so with ``numjobs`` > 1 the metrics cover all jobs
together; each job then gets its own data file (or, on dm-crypt, its own
``size``-long region of the device via ``offset_increment``) so that ``verify``
checks data no other job overwrote. The data file is laid out before tracing starts so the first run
does not trace the layout. Metrics come from ``fio --output-format=json``
(``jobs[0].read|write``): IOPS, bandwidth and completion-latency (``clat_ns``)
mean and percentiles.

``dm-crypt: {backing: loop | /dev/..., size-mb, cipher, flags}`` runs the job on
a throw-away dm-crypt device (:mod:`~lisa_ext.campaign.workloads.dmcrypt`)
created before the run and removed after it, failure included.
"""

from __future__ import annotations

import json
import os
import re

from lisa_ext.campaign import remote
from lisa_ext.schema import Field, Number, check_mapping
from lisa_ext.campaign.store import Metric
from lisa_ext.campaign.workloads.base import RunContext, Workload, WorkloadError
from lisa_ext.campaign.workloads.dmcrypt import CRYPT_SCHEMA, CryptDevice
from lisa_ext.errors import SpecError

__all__ = ["Fio", "parse_fio_json", "read_fio_json"]

_RESERVED = ("name", "output", "output-format", "output_format", "group_reporting")
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


def _fio_arg(key: str, value) -> str:
    if isinstance(value, bool):
        value = int(value)
    return remote.quote(f"--{key}={value}")


class Fio(Workload):
    KIND = "fio"
    TOOLS = ("fio",)
    SCHEMA = {
        "options": Field((dict,), "fio options as key: value, e.g. rw: randread, bs: 4k", True),
        "timeout-s": Field(Number, "kill fio after this many seconds (default: 10 x runtime + 60)"),
        "dm-crypt": Field((dict,), "run on a throw-away dm-crypt device: {backing: loop or /dev/..., "
                          "size-mb, cipher, key-bytes, flags}"),
    }

    def __init__(self, name: str, options: dict):
        super().__init__(name, options)
        if "dm-crypt" in options:
            self.TOOLS = ("fio", "dmsetup", "losetup", "blockdev")

    @classmethod
    def check_options(cls, path, prefix, options):
        for key, value in options["options"].items():
            where = f"{prefix}.options.{key}"
            if not re.match(r"^[a-z0-9_]+$", str(key)):
                raise SpecError(path, where, "not a fio option name (lower-case letters, digits, _)")
            if key in _RESERVED:
                raise SpecError(path, where, f"set by lisa-ext itself; do not use: {', '.join(_RESERVED)}")
            if not isinstance(value, (str, int, float, bool)):
                raise SpecError(path, where, f"expected a string or a number, got {value!r}")
        if "dm-crypt" in options:
            check_mapping(path, options["dm-crypt"], f"{prefix}.dm-crypt", CRYPT_SCHEMA)
            for key in ("filename", "directory"):
                if key in options["options"]:
                    raise SpecError(path, f"{prefix}.options.{key}",
                                    "not allowed with dm-crypt (fio runs on the dm-crypt device)")

    def _job_args(self, ctx: RunContext) -> str:
        opts = dict(self.options["options"])
        device = getattr(self, "_device", None)
        several = int(str(opts.get("numjobs", 1))) > 1
        if device is not None:
            opts["filename"] = device.path
            if several and "size" in opts and "offset_increment" not in opts:
                # each job its own region of the device: verify fails when jobs overwrite each other
                opts["offset_increment"] = opts["size"]
        elif "filename" not in opts and "directory" not in opts:
            if several:
                # fio names each job's file <name>.<job>.0 in the directory: one file per job
                opts["directory"] = ctx.target.path.dirname(self._default_file(ctx.target))
            else:
                opts["filename"] = self._default_file(ctx.target)
        args = [_fio_arg("name", self.name)] + [_fio_arg(k, v) for k, v in opts.items()]
        return " ".join(args)

    def _default_file(self, target) -> str:
        return target.path.join(target.working_directory, "lisa-ext-fio", f"{self.name}.data")

    def _timeout(self) -> float:
        if "timeout-s" in self.options:
            return float(self.options["timeout-s"])
        runtime = str(self.options["options"].get("runtime", "60"))
        m = re.match(r"^(\d+(?:\.\d+)?)", runtime)
        return 10 * float(m.group(1) if m else 60) + 60

    def prepare(self, ctx: RunContext) -> None:
        target = ctx.target
        if "dm-crypt" in self.options:
            scratch = target.path.join(target.working_directory, "lisa-ext-fio")
            self._device = CryptDevice(target, f"lisa-ext-{self.name}", self.options["dm-crypt"], scratch)
            self._device.create(ctx)
        elif "filename" not in self.options["options"] and "directory" not in self.options["options"]:
            target.execute(f"mkdir -p {remote.quote(target.path.dirname(self._default_file(target)))}")
        # lay the data file out now, so that no run traces the layout
        # in the run directory: fio leaves files in its working directory (verify state)
        out = target.execute(f"cd {remote.quote(ctx.remote_dir)} && fio --create_only=1 {self._job_args(ctx)} 2>&1; "
                             "echo \"rc=$?\"",
                             check_exit_code=False, timeout=600)
        output, _, status = out.rstrip().rpartition("\n")
        if status != "rc=0":
            raise WorkloadError("fio could not lay out its data file: " + _tail(output))

    def run(self, ctx: RunContext) -> list[Metric]:
        target = ctx.target
        d = remote.quote(ctx.remote_dir)
        command = (f"cd {d} && fio --output-format=json --output=fio.json --group_reporting "
                   f"{self._job_args(ctx)} >fio.stdout 2>fio.stderr")
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
    """fio's own error lines ("fio: ...", "...err=..."), else the last lines of its output."""
    all_lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in all_lines if line.startswith("fio:") or "err=" in line]
    return " | ".join((errors or all_lines)[-lines:]) or "(no output)"
