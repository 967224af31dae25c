"""BPF schedulers (sched_ext) as campaign variants: validated in the spec, run around the workload.

A variant may name a scheduler of the kernel tree's ``tools/sched_ext``::

    variants:
      - name: eevdf
        kernel: ../kernels/scx/eevdf.yml
      - name: scx-simple
        kernel: ../kernels/scx/eevdf.yml
        sched-ext: {scheduler: scx_simple, args: [-f]}

or one of the scx project's schedulers published on crates.io, at one pinned
version, built with cargo on the host (:func:`~lisa_ext.campaign.tools.build_scx_crate`)::

      - name: bpfland
        kernel: ../kernels/scx/eevdf.yml
        sched-ext: {crate: scx_bpfland, version: 1.1.4, args: [-s, '5000']}

For each run of such a variant the runner (:func:`running`) starts the scheduler
on the target before the workload, waits until the kernel says it is the one
scheduling (``/sys/kernel/sched_ext/state`` is ``enabled`` and
``/sys/kernel/sched_ext/root/ops`` names it), and after the workload checks it
still is, then stops it with SIGINT. The run's metadata records the scheduler,
its arguments, its crate and version, its binary's hash, its exit and the kernel's reason for
disabling it (the ``sched_ext: BPF scheduler "..." disabled (...)`` line of the
kernel log). A scheduler that exited or was kicked out during the run fails the
run with the kernel's reason; the kernel is back on EEVDF by then, which every
run of a variant without a scheduler checks (:func:`check_not_running`).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import signal
import tempfile
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from lisa_ext.campaign import remote
from lisa_ext.campaign.tools import (SCX_SCHEDULERS, build_scx_crate, build_scx_scheduler, crate_name_problem,
                                    crate_version_problem, find_bpf_clang, install_tool)
from lisa_ext.errors import SpecError, UserError, one_line
from lisa_ext.kernel.spec import DEFAULT_DEBIAN_PACKAGE, BaseTree, load_variant_spec
from lisa_ext.kernel.tree import prepare_tree
from lisa_ext.schema import Field, check_mapping, show

__all__ = ["SCHED_EXT_SCHEMA", "STATE_FILE", "SchedExtError", "SchedExtSetting", "check_not_running",
           "disable_reason", "file_sha256", "install_scheduler", "load_failure", "load_setting", "preflight",
           "running", "sched_ext_missing", "tracing_programs_missing"]

STATE_FILE = "/sys/kernel/sched_ext/state"
OPS_FILE = "/sys/kernel/sched_ext/root/ops"
BTF_FILE = "/sys/kernel/btf/vmlinux"
#: arguments of one scheduler: each is one word of its command line
MAX_ARGS = 64
#: seconds of the target's time a scheduler gets to load and be enabled, and to stop
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
#: the kernel's line when it disables a BPF scheduler (kernel/sched/ext.c, scx_ops_disable_workfn)
_DISABLED_RE = re.compile(r'sched_ext: BPF scheduler "([^"]*)" disabled \((.*)\)\s*$')
_SCHED_CLASS_EXT = re.compile(r"^CONFIG_SCHED_CLASS_EXT=y\s*$", re.M)
_ENABLED_RE = re.compile(r'sched_ext: BPF scheduler "([^"]*)" enabled')
#: libbpf's lines on a program the kernel refused (tools/lib/bpf/libbpf.c, bpf_object_load_prog),
#: to stderr from a C scheduler, through the tracing log (stdout, colour codes) from a crate's
_LOAD_FAILED_RE = re.compile(r"libbpf: prog '([^']+)': BPF program load failed: (.+?)\s*$")
_LOG_BEGIN, _LOG_END = "-- BEGIN PROG LOAD LOG --", "-- END PROG LOAD LOG --"
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
#: verifier log lines shown in a run's error: its last, the instruction it stopped at and why
VERIFIER_LINES = 3
#: characters kept of each (a line of the target's, in a one-line error)
_LINE_CHARS = 200
#: the verifier's closing statistics, after the error
_LOG_STATS_RE = re.compile(r"^(processed \d+ insns|verification time)")
#: perf event sources that exist only with CONFIG_BPF_EVENTS' prerequisites (kprobe or uprobe
#: events): without them BPF_PROG_TYPE_TRACING does not exist (include/linux/bpf_types.h)
_TRACING_PMUS = ("/sys/bus/event_source/devices/kprobe", "/sys/bus/event_source/devices/uprobe")


class SchedExtError(RuntimeError):
    """The BPF scheduler of a run did not start, or did not run to the end of the workload."""


def _word_problem(value: Any) -> str | None:
    """An argument may be an option (``-s``), but one word: no whitespace or control character."""
    if not isinstance(value, str) or not value:
        return f"expected an argument (a non-empty string), got {show(value)}"
    bad = next((c for c in value if c.isspace() or unicodedata.category(c)[0] == "C"), None)
    if bad is not None:
        return f"{show(value)} holds whitespace or a control character ({bad!r}); not one argument of the scheduler"
    return None


SCHED_EXT_SCHEMA = {
    "scheduler": Field((str,), "one of the kernel tree's: " + ", ".join(SCX_SCHEDULERS),
                       check=lambda v: None if v in SCX_SCHEDULERS else
                       f"unknown scheduler {v!r}; lisa-ext builds: {', '.join(SCX_SCHEDULERS)} "
                       "(or a crate from crates.io: crate: NAME, version: X.Y.Z)"),
    "crate": Field((str,), "a scheduler crate of crates.io, e.g. scx_bpfland", check=crate_name_problem),
    "version": Field((str,), "the crate's exact version, quoted, e.g. '1.1.4'", check=crate_version_problem),
    "args": Field((list,), "the scheduler's command-line arguments, e.g. [-s, '20000']",
                  check=lambda v: (f"{len(v)} arguments; at most {MAX_ARGS}" if len(v) > MAX_ARGS
                                   else next(filter(None, map(_word_problem, v)), None))),
}


@dataclass(frozen=True)
class SchedExtSetting:
    """The BPF scheduler a variant runs its workloads under: one of the kernel tree's examples, or
    a crate of crates.io (its binary is named like the crate) at ``version``."""

    scheduler: str
    args: tuple[str, ...] = ()
    version: str | None = None
    """The crate's version for a scheduler from crates.io, None for the kernel tree's."""

    @property
    def from_crate(self) -> bool:
        """Whether the scheduler is a crate of crates.io."""
        return self.version is not None

    @property
    def ops(self) -> str:
        """The name the scheduler registers under (``/sys/kernel/sched_ext/root/ops``); a crate's
        (scx_utils) adds its version and build to it: ``bpfland_1.1.4_x86_64_unknown_linux_gnu``."""
        return self.scheduler.removeprefix("scx_") if self.from_crate else SCX_SCHEDULERS[self.scheduler]

    def runs_as(self, ops: str | None) -> bool:
        """Whether the kernel's ``ops`` name is this scheduler's."""
        if ops is None:
            return False
        return ops == self.ops or (self.from_crate and ops.startswith(self.ops + "_"))


def load_setting(path: Path, prefix: str, node: Any, kernel_spec: Path | None) -> SchedExtSetting:
    """A variant's ``sched-ext:`` mapping, checked, with its kernel variant spec when it names one
    (without, the target's own kernel is checked before the first run)."""
    value = check_mapping(path, node, prefix, SCHED_EXT_SCHEMA)
    if ("scheduler" in value) == ("crate" in value):
        raise SpecError(path, prefix, "expected exactly one of scheduler (the kernel tree's: "
                        f"{', '.join(SCX_SCHEDULERS)}) or crate (with version, from crates.io)")
    if "crate" in value and "version" not in value:
        raise SpecError(path, f"{prefix}.version", f"missing required key with crate {value['crate']!r}: its "
                        "exact version on crates.io, e.g. version: '1.1.4'")
    if "scheduler" in value and "version" in value:
        raise SpecError(path, f"{prefix}.version", "a version goes with a crate of crates.io; scheduler "
                        f"{value['scheduler']!r} is built from the kernel variant's tree")
    if kernel_spec is not None:
        configs = load_variant_spec(kernel_spec).configs
        if not any(_SCHED_CLASS_EXT.search(c.read_text(errors="replace")) for c in configs):
            raise SpecError(path, prefix, f"kernel variant {kernel_spec} cannot load a BPF scheduler: none of its "
                            "config fragments sets CONFIG_SCHED_CLASS_EXT=y (add ../configs/sched-ext.config, "
                            "docs/sched-ext.md)")
    return SchedExtSetting(value.get("scheduler") or value["crate"], tuple(str(a) for a in value.get("args") or ()),
                           value.get("version"))


def disable_reason(kernel_log: str, ops: str) -> str | None:
    """The reason of the kernel's ``BPF scheduler "<ops>" disabled (...)`` line after its last
    ``enabled`` line in ``kernel_log`` (with the error message the kernel printed after it, if
    any), or None: an earlier run's reason is never this one's."""
    reason = None
    lines = kernel_log.splitlines()
    for i, line in enumerate(lines):
        enabled = _ENABLED_RE.search(line)
        if enabled and enabled.group(1) == ops:
            reason = None
        match = _DISABLED_RE.search(line)
        if match and match.group(1) == ops:
            reason = match.group(2)
            follow = lines[i + 1] if i + 1 < len(lines) else ""
            detail = re.search(rf"sched_ext: {re.escape(ops)}: (.*)$", follow)
            if detail:
                reason += f": {detail.group(1).strip()}"
    return reason


def load_failure(output: str) -> str | None:
    """The program the kernel refused and why, from a scheduler's output: libbpf's ``prog 'NAME':
    BPF program load failed: ERROR`` and the verifier's error (the last lines of its log), or None."""
    lines = [_ANSI_RE.sub("", line).strip() for line in output.splitlines()]
    for i, line in enumerate(lines):
        failed = _LOAD_FAILED_RE.search(line)
        if not failed:
            continue
        name = failed.group(1)
        log: list[str] = []
        # libbpf prints the log right after the failure, the crates' logger a blank line apart
        begin = next((j for j in range(i + 1, min(i + 4, len(lines)))
                      if _LOG_BEGIN in lines[j] and f"'{name}'" in lines[j]), None)
        for later in lines[begin + 1:] if begin is not None else ():
            if _LOG_END in later:
                break
            if later and not _LOG_STATS_RE.match(later):
                log.append(one_line(later[:_LINE_CHARS]))
        return (f"prog '{one_line(name[:_LINE_CHARS])}': BPF program load failed: "
                f"{one_line(failed.group(2)[:_LINE_CHARS])}; "
                + (f"verifier: {' / '.join(log[-VERIFIER_LINES:])}" if log else "no verifier log"))
    return None


def tracing_programs_missing(target) -> str | None:
    """Why the running kernel refuses tracing programs (fentry, tracepoints), or None."""
    probe = " || ".join(f"test -e {remote.quote(p)}" for p in _TRACING_PMUS)
    if target.execute(f"{{ {probe}; }} && echo yes || echo no", as_root=True,
                      check_exit_code=False).strip() == "yes":
        return None
    return ("the kernel has no kprobe or uprobe perf events, so no CONFIG_BPF_EVENTS and no tracing "
            "programs (fentry, tracepoints) (kernels/configs/sched-ext.config sets them)")


def _read(target, path: str) -> str | None:
    out = target.execute(f"cat {remote.quote(path)} 2>/dev/null || echo '<none>'", as_root=True,
                         check_exit_code=False).strip()
    return None if out == "<none>" else out


def sched_ext_missing(target) -> str | None:
    """What the running kernel lacks to load a BPF scheduler, or None."""
    if _read(target, STATE_FILE) is None:
        return f"the running kernel has no sched_ext ({STATE_FILE} missing: CONFIG_SCHED_CLASS_EXT)"
    btf = target.execute(f"test -r {BTF_FILE} && echo yes || echo no", as_root=True, check_exit_code=False)
    if btf.strip() != "yes":
        return f"the running kernel has no BTF ({BTF_FILE} missing: CONFIG_DEBUG_INFO_BTF)"
    return None


def preflight(target, setting: SchedExtSetting, kernel_spec: Path | None,
              echo: Callable[[str], None] = lambda _msg: None) -> str | None:
    """What stops ``setting``'s scheduler from running, before the first run: no clang to build
    it on the host, a crate that does not build (built here, on the host, once: it does not
    depend on the target's kernel), or (without a kernel variant, whose config the spec checked)
    no sched_ext in the target's running kernel. ``echo`` is told when a crate's build starts."""
    try:
        find_bpf_clang()
        if setting.from_crate:
            build_scx_crate(setting.scheduler, setting.version, target.abi, echo)
    except UserError as exc:
        return str(exc)
    return sched_ext_missing(target) if kernel_spec is None else None


def check_not_running(target, meta: dict) -> None:
    """A run without a BPF scheduler: record that the kernel schedules on its own (EEVDF), and
    refuse to run when some BPF scheduler is still loaded (the run would not be what it says)."""
    state = _read(target, STATE_FILE)
    if state is None:
        return
    meta["sched_ext"] = {"state": state}
    if state != "disabled":
        raise SchedExtError(f"a BPF scheduler ({_read(target, OPS_FILE) or '?'}) is loaded ({STATE_FILE}: "
                            f"{state}) in a run without one")


def _kernel_log(target) -> str:
    return target.execute("dmesg 2>/dev/null | grep 'sched_ext:' | tail -n 50", as_root=True,
                          check_exit_code=False)


def _exit_before_enabled(target, setting: SchedExtSetting, rc: int, output: str, tail: str) -> SchedExtError:
    """A scheduler that stopped before the kernel enabled it: the program the kernel refused (and
    why a kernel without tracing programs refuses it silently), else its last lines."""
    refused = load_failure(output)
    if refused and refused.endswith("no verifier log"):
        missing = tracing_programs_missing(target)
        refused += f"; {missing}" if missing else ""
    return SchedExtError(f"{setting.scheduler} exited with status {rc} before the kernel enabled it: "
                         f"{refused or tail or '(no output)'}")


def _wait_enabled(target, bg, setting: SchedExtSetting, stderr_of: Callable[[], str],
                  output_of: Callable[[], str]) -> str:
    """Wait until the kernel runs ``setting``'s scheduler; returns the name it registered under."""
    deadline = remote.TargetDeadline(target, START_TIMEOUT_S)
    while True:
        state = _read(target, STATE_FILE)
        if state == "enabled":
            ops = _read(target, OPS_FILE)
            if not setting.runs_as(ops):
                raise SchedExtError(f"sched_ext runs {ops!r}, not {setting.scheduler} ({setting.ops!r})")
            return ops
        rc = bg.poll()
        if rc is not None:
            raise _exit_before_enabled(target, setting, rc, output_of(), stderr_of())
        if deadline.passed():
            raise SchedExtError(f"{setting.scheduler} was not enabled within {START_TIMEOUT_S:.0f} s "
                                f"({STATE_FILE}: {state})")
        time.sleep(0.1)


@contextlib.contextmanager
def running(target, setting: SchedExtSetting, binary: str, sha256: str, remote_dir: str, local_dir: Path,
            on_pid: Callable[[int], None], meta: dict) -> Iterator[None]:
    """Run the body under ``setting``'s scheduler (``binary`` on the target, ``sha256`` its hash):
    start it and check it is enabled, check it still is after the body, stop it (SIGINT) in any
    case. ``meta["sched_ext"]`` records name, arguments, hash, exit and the kernel's reason; its
    output goes to ``sched_ext.stdout`` / ``.stderr`` in ``local_dir``."""
    missing = sched_ext_missing(target)
    if missing:
        raise SchedExtError(f"cannot run {setting.scheduler}: {missing}")
    check_not_running(target, {})
    record: dict[str, Any] = {"scheduler": setting.scheduler, "args": list(setting.args), "sha256": sha256,
                              "ops": setting.ops}
    if setting.from_crate:
        record.update({"crate": setting.scheduler, "version": setting.version})
    meta["sched_ext"] = record
    stem = remote.quote(f"{remote_dir}/sched_ext")
    words = " ".join(remote.quote(w) for w in (binary, *setting.args))
    bg = remote.start(target, f"exec {words} >{stem}.stdout 2>{stem}.stderr", as_root=True, on_pid=on_pid)

    def stderr_tail() -> str:
        out = target.execute(f"tail -n 3 {stem}.stderr 2>/dev/null", as_root=True, check_exit_code=False)
        return " | ".join(line.strip() for line in out.splitlines() if line.strip())

    def output() -> str:  # bounded: a verbose scheduler's whole log is not needed to find libbpf's
        return target.execute(f"head -c 262144 {stem}.stderr {stem}.stdout 2>/dev/null", as_root=True,
                              check_exit_code=False)

    lost: str | None = None
    try:
        record["ops"] = _wait_enabled(target, bg, setting, stderr_tail, output)
        record["state"] = "enabled"
        yield
        state, ops, rc = _read(target, STATE_FILE), _read(target, OPS_FILE), bg.poll()
        record["state_after"] = state
        if rc is not None or state != "enabled" or ops != record["ops"]:
            lost = (f"{setting.scheduler} did not run to the end of the workload (exit status {rc}, "
                    f"{STATE_FILE}: {state}, ops: {ops})")
    finally:
        rc = bg.poll()
        if rc is None:
            rc = remote.stop(target, bg, signal.SIGINT, STOP_TIMEOUT_S)
        record["exit_status"] = rc
        deadline = remote.TargetDeadline(target, STOP_TIMEOUT_S)
        while _read(target, STATE_FILE) not in ("disabled", None) and not deadline.passed():
            time.sleep(0.1)
        record["exit_reason"] = disable_reason(_kernel_log(target), record["ops"])
        record["exit_message"] = next((line[len("EXIT: "):] for line in reversed(stderr_tail().split(" | "))
                                       if line.startswith("EXIT: ")), None)
        for name in ("sched_ext.stdout", "sched_ext.stderr"):
            if target.file_exists(f"{remote_dir}/{name}"):
                target.pull(f"{remote_dir}/{name}", str(local_dir / name))
    if lost is not None:
        raise SchedExtError(f"{lost}; the kernel disabled it: {record['exit_reason'] or 'no reason logged'}")


def file_sha256(path: str | Path) -> str:
    """The hash recorded for a scheduler binary."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def install_scheduler(target, setting: SchedExtSetting, kernel_spec: Path | None) -> tuple[str, str]:
    """Build ``setting``'s scheduler, a crate with cargo, else from the base tree of
    ``kernel_spec`` (Debian's linux-source without one) against the running kernel's BTF, pulled
    from the target, and install it there; returns its path on the target and its hash."""
    missing = sched_ext_missing(target)
    if missing:
        raise SchedExtError(f"cannot run {setting.scheduler}: {missing}")
    if setting.from_crate:
        binary = build_scx_crate(setting.scheduler, setting.version, target.abi)
        return install_tool(target, binary), file_sha256(binary)
    base = load_variant_spec(kernel_spec).base if kernel_spec is not None else BaseTree("debian", DEFAULT_DEBIAN_PACKAGE)
    tree = prepare_tree(base, log=lambda _msg: None)
    staged = f"{target.working_directory}/lisa-ext-vmlinux.btf"
    with tempfile.TemporaryDirectory(prefix="lisa-ext-btf.") as tmp:
        btf = Path(tmp) / "vmlinux.btf"
        # sysfs states no size until read: copy it into a plain file before pulling
        target.execute(f"cat {BTF_FILE} > {remote.quote(staged)}", as_root=True)
        target.pull(staged, str(btf))
        target.execute(f"rm -f {remote.quote(staged)}", as_root=True, check_exit_code=False)
        binary = build_scx_scheduler(setting.scheduler, tree, btf, target.abi)
    return install_tool(target, binary), file_sha256(binary)
