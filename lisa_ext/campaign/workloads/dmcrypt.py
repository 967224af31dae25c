"""A throw-away dm-crypt device for a workload's I/O (RFC 001: fio on dm-crypt).

The device-mapper ``crypt`` target (drivers/md/dm-crypt.c) encrypts each bio
in its ``kcryptd`` workqueue, which is unbound unless ``same_cpu_crypt`` is
given: the work the workqueue affinity scopes place. The device is created
with ``dmsetup create`` and a table line::

    0 <sectors> crypt <cipher> <hex key> 0 <backing device> 0 [<n> <flags>...]

over either a given scratch block device or a sparse loop file (``losetup``).
Since Linux 6.5 ``kcryptd`` is created ``WQ_SYSFS`` (``crypt_ctr()``): its attributes live in
``/sys/devices/virtual/workqueue/kcryptd-<major>:<minor>-<id>/`` (kernel/workqueue.c,
``wq_sysfs_unbound_attrs``) and exist only while the device does, so ``workqueue:``
writes them right after the device is created (e.g. ``affinity_strict: 1``, RFC 001's
CACHE+STRICT) and reads each back; they go away with the device.
The key is random (``/dev/urandom``) and thrown away: the data never outlives
the run. Before anything is created an idempotent cleanup command is handed to
the runner (:attr:`RunContext.on_cleanup`), so a device or loop left behind by a
killed runner is removed on resume; :meth:`CryptDevice.remove` undoes it all
after the run, failure included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lisa_ext.campaign import remote
from lisa_ext.schema import Field
from lisa_ext.campaign.workloads.base import RunContext, WorkloadError

__all__ = ["CRYPT_FLAGS", "CRYPT_SCHEMA", "CryptDevice", "WORKQUEUE_ATTRS"]

#: optional dm-crypt table parameters (Documentation/admin-guide/device-mapper/dm-crypt.rst)
CRYPT_FLAGS = ("same_cpu_crypt", "submit_from_crypt_cpus", "no_read_workqueue", "no_write_workqueue")
#: writable attributes of an unbound workqueue in sysfs (kernel/workqueue.c, wq_sysfs_unbound_attrs)
WORKQUEUE_ATTRS = ("affinity_scope", "affinity_strict", "cpumask", "max_active", "nice")
#: a block device path: it is a word of dmsetup's table, inside the target shell's double quotes
_DEVICE = re.compile(r"/dev/[A-Za-z0-9_.:/-]{1,200}")


def _check_flags(value: list) -> str | None:
    bad = [f for f in value if f not in CRYPT_FLAGS]
    return f"unknown dm-crypt flag(s) {bad}; allowed: {', '.join(CRYPT_FLAGS)}" if bad else None


def _check_workqueue(value: dict) -> str | None:
    bad = [k for k in value if k not in WORKQUEUE_ATTRS]
    if bad:
        return f"unknown kcryptd workqueue attribute(s) {bad}; allowed: {', '.join(WORKQUEUE_ATTRS)}"
    odd = [k for k, v in value.items() if isinstance(v, bool) or not isinstance(v, (str, int))]
    return f"{odd}: a workqueue attribute value is a string or an integer" if odd else None


CRYPT_SCHEMA = {
    "backing": Field((str,), "'loop' (a sparse file on the target) or a scratch block device, e.g. /dev/vdb "
                     "(its data is destroyed)", True,
                     lambda v: None if v == "loop" or (_DEVICE.fullmatch(v) and ".." not in v.split("/"))
                     else "must be loop or a /dev/ path of letters, digits, '_', '.', '-', ':' and '/'"),
    "size-mb": Field((int,), "size of the loop file in MiB (default 512; loop only)",
                     bounds=(1, 1 << 20)),
    "cipher": Field((str,), "dm-crypt cipher spec (default aes-xts-plain64)",
                    check=lambda v: None if re.fullmatch(r"[a-z0-9_()-]{1,64}", v) else "not a cipher spec"),
    "key-bytes": Field((int,), "random key length in bytes (default 64: AES-256 in XTS mode)",
                       bounds=(16, 64),
                       check=lambda v: None if v in (16, 24, 32, 48, 64) else "must be 16, 24, 32, 48 or 64"),
    "flags": Field((list,), f"dm-crypt optional parameters, any of: {', '.join(CRYPT_FLAGS)}",
                   check=_check_flags),
    "workqueue": Field((dict,), "attributes of the device's kcryptd workqueue written once it exists, "
                       f"any of: {', '.join(WORKQUEUE_ATTRS)}; e.g. {{affinity_strict: 1}}",
                       check=_check_workqueue),
}


@dataclass
class CryptDevice:
    """One dm-crypt device on the target, named ``name`` (``/dev/mapper/<name>``)."""

    target: object
    name: str
    options: dict
    scratch: str
    """Directory on the target for the loop file."""

    @property
    def path(self) -> str:
        return f"/dev/mapper/{self.name}"

    @property
    def _loop_file(self) -> str:
        return self.target.path.join(self.scratch, f"{self.name}.img")

    def cleanup_command(self) -> str:
        q = remote.quote
        # without udev (the virtual board) dmsetup leaves the /dev/mapper node behind: mknodes drops it
        command = f"dmsetup remove --retry {q(self.name)} 2>/dev/null; dmsetup mknodes 2>/dev/null"
        if self.options["backing"] == "loop":
            command += (f"; for l in $(losetup -n -O NAME -j {q(self._loop_file)} 2>/dev/null); do "
                        f"losetup -d $l; done; rm -f {q(self._loop_file)}")
        return command + "; true"

    def _execute(self, command: str, what: str) -> str:
        out = self.target.execute(f"{command} 2>&1; echo rc=$?", as_root=True, check_exit_code=False, timeout=120)
        text, _, status = out.rstrip().rpartition("\n")
        if status.strip() != "rc=0":
            raise WorkloadError(f"dm-crypt setup: {what} failed: {text.strip()[-300:] or '(no output)'}")
        return text.strip()

    def create(self, ctx: RunContext) -> str:
        """Create the device; returns its path. Registers the cleanup first."""
        q = remote.quote
        ctx.on_cleanup(self.cleanup_command())
        if self.target.execute(f"dmsetup info {q(self.name)} >/dev/null 2>&1 && echo exists",
                               as_root=True, check_exit_code=False).strip() == "exists":
            raise WorkloadError(f"dm-crypt setup: a device named {self.name} already exists "
                                f"(remove it with: dmsetup remove {self.name})")
        self._execute("modprobe dm-crypt 2>/dev/null; dmsetup targets | grep -qw crypt",
                      "finding the dm-crypt target (kernel without CONFIG_DM_CRYPT, or no dmsetup?)")
        backing = self.options["backing"]
        if backing == "loop":
            size = int(self.options.get("size-mb", 512))
            self._execute(f"mkdir -p {q(self.scratch)} && truncate -s {size}M {q(self._loop_file)}",
                          "creating the loop file")
            backing = self._execute(f"losetup -f --show {q(self._loop_file)}", "losetup")
        sectors = self._execute(f"blockdev --getsz {q(backing)}", f"reading the size of {backing}")
        flags = list(self.options.get("flags", []))
        extra = f" {len(flags)} {' '.join(flags)}" if flags else ""
        cipher = self.options.get("cipher", "aes-xts-plain64")
        # the key only ever exists in the kernel and this shell's argument list
        table = f"0 {sectors} crypt {cipher} $(od -An -tx1 -N{int(self.options.get('key-bytes', 64))} /dev/urandom | tr -d ' \\n') 0 {backing} 0{extra}"
        self._execute(f'dmsetup create {q(self.name)} --table "{table}"', "dmsetup create")
        # with udev the node appears once udev processed the event; without it, mknodes makes it.
        # Never let fio start on a missing node: it would create a plain file in /dev/mapper.
        self._execute(f"udevadm settle 2>/dev/null; dmsetup mknodes {q(self.name)} && test -b {q(self.path)}",
                      f"creating the block device node {self.path}")
        self._set_workqueue(self.options.get("workqueue") or {})
        return self.path

    def workqueue_dir(self) -> str:
        """sysfs directory of the device's kcryptd workqueue (``kcryptd-<major>:<minor>-<id>``)."""
        q = remote.quote
        devno = self._execute(f"dmsetup info -c --noheadings -o major,minor {q(self.name)}",
                              "reading the device number").replace(" ", "")
        found = self._execute(f"ls -d /sys/devices/virtual/workqueue/kcryptd-{q(devno)}-*",
                              f"finding the kcryptd workqueue of {devno} (kernel older than 6.5: "
                              "kcryptd is not WQ_SYSFS)").split()
        if len(found) != 1:
            raise WorkloadError(f"dm-crypt setup: expected one kcryptd workqueue for {devno}, found {found}")
        return found[0]

    def _set_workqueue(self, attrs: dict) -> None:
        if not attrs:
            return
        q = remote.quote
        wq = self.workqueue_dir()
        for attr, value in attrs.items():
            path = f"{wq}/{attr}"
            got = self._execute(f"echo {q(str(value))} > {q(path)} && cat {q(path)}", f"writing {value} to {path}")
            # affinity_scope reads back as "default (cache)" when it follows the default
            if str(value) not in got.replace("(", " ").replace(")", " ").split():
                raise WorkloadError(f"dm-crypt setup: {path} reads {got!r} after writing {value!r}")

    def remove(self) -> None:
        self.target.execute(self.cleanup_command(), as_root=True, check_exit_code=False, timeout=120)
