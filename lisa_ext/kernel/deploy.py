"""Put a kernel variant on a target, boot it, and prove that it is what runs.

Three ways, one per kind of target:

* ``boot`` — the virtual board: restart QEMU with the variant's bzImage and a
  fresh modules disk (:meth:`lisa_ext.vboard.board.VirtualBoard.up`).
* ``kexec`` — any Linux target reached over SSH (the virtual board included):
  copy the kernel and its modules, ``kexec -s -l`` (``kexec_file_load``, falling
  back to ``kexec -l``) and ``kexec -e``, wait for the new boot id. This is the
  path a real Linux board uses: no bootloader or flashing involved.
* ``fastboot`` — Android: pack the arm64 Image with ``mkbootimg`` and
  ``fastboot boot`` it (RAM only, nothing flashed). Implemented after the
  mkbootimg/fastboot documentation but **untested here**: this machine has no
  phone.

Whatever the path, the running kernel is then checked against the build:
``uname -r`` (release), ``uname -v`` (version string, which carries the build
number and timestamp) and, when both sides know it, the GNU build id read from
``/sys/kernel/notes``. A mismatch raises instead of letting a campaign measure
the wrong kernel. The variant's runtime knobs are written and read back last.

The variant is built for the target's architecture: the virtual board's (x86_64
or arm64), ``uname -m`` of a Linux target, arm64 for Android.

:func:`deploy_variant` returns a provenance dict that campaigns store beside
their results.
"""

from __future__ import annotations

import io
import logging
import os
import shlex
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from ruamel.yaml import YAML

from lisa_ext.compat import import_lisa
from lisa_ext.errors import UserError
from lisa_ext.kernel.build import build_variant
from lisa_ext.knobs import KnobError, ShellKnobTarget, apply_knobs
from lisa_ext.running_kernel import probe_running_kernel
from lisa_ext.vboard.board import VirtualBoard, board_for_target_conf
from lisa_ext.vboard.rootfs import MODULES_LOAD_FILE, find_release_dir

__all__ = [
    "DeployError",
    "deploy_variant",
    "deploy_artefacts",
    "modules_to_load",
    "METHODS",
]

log = logging.getLogger(__name__)

METHODS = ("auto", "boot", "kexec", "fastboot")
_REMOTE_DIR = "/tmp/lisa-ext-kexec"


class DeployError(UserError):
    """The variant could not be installed, or another kernel runs than the one built."""


class _Shell(Protocol):
    """What the kexec path needs from a Linux target."""

    def run(self, command: str, *, timeout: float = 600) -> str: ...
    def push(self, local: Path, remote: str) -> None: ...


# -- adapters: a uniform shell over the targets a campaign may hand us --------

@dataclass
class _BoardShell:
    board: Any  # lisa_ext.vboard.board.VirtualBoard

    def run(self, command: str, *, timeout: float = 600) -> str:
        return self.board.run(command, timeout=timeout).stdout.decode(errors="replace")

    def push(self, local: Path, remote: str) -> None:
        self.board.push(local, remote)


@dataclass
class _SshShell:
    """A Linux target from a LISA target_conf, reached with the ssh client."""

    host: str
    port: int
    username: str
    keyfile: str | None

    def _base(self) -> list[str]:
        cmd = ["ssh", "-p", str(self.port), "-o", "StrictHostKeyChecking=no",
               "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
               "-o", "ConnectTimeout=20", "-T"]
        if self.keyfile:
            cmd += ["-i", self.keyfile]
        return cmd + [f"{self.username}@{self.host}"]

    def run(self, command: str, *, timeout: float = 600) -> str:
        proc = subprocess.run(self._base() + [command], capture_output=True, timeout=timeout)
        if proc.returncode != 0:
            raise DeployError(f"on {self.host}, {command!r} exited with {proc.returncode}: "
                              f"{proc.stderr.decode(errors='replace').strip()}")
        return proc.stdout.decode(errors="replace")

    def push(self, local: Path, remote: str) -> None:
        with open(local, "rb") as f:
            proc = subprocess.run(self._base() + [f"cat > {shlex.quote(remote)}"], stdin=f,
                                  capture_output=True, timeout=600)
        if proc.returncode != 0:
            raise DeployError(f"copying {local} to {self.host} failed: {proc.stderr.decode(errors='replace')}")


@dataclass
class _DevlibShell:
    """A connected devlib (or LISA) target."""

    target: Any

    def run(self, command: str, *, timeout: float = 600) -> str:
        return self.target.execute(command, as_root=self.target.is_rooted, timeout=timeout)

    def push(self, local: Path, remote: str) -> None:
        self.target.push(str(local), remote)

    def reconnect(self) -> None:
        # the SSH connection died with the old kernel
        self.target.connect()


def _load_target_conf(path: Path) -> Mapping[str, Any]:
    target_mod = import_lisa("lisa.target")
    conf = target_mod.TargetConf.from_yaml_map(str(path))
    return {key: conf.get(key) for key in ("kind", "host", "port", "username", "keyfile", "device")}


def _conf_board(path: Path) -> VirtualBoard | None:
    """The board ``target-configs/vboard.yml``, ``vboard-arm64.yml`` or a copy of them reaches."""
    data = YAML(typ="rt").load(Path(path).read_text()) or {}
    return board_for_target_conf((data.get("target-conf") or {}).get("name"))


def _connected_board(target: Any):
    """The virtual board when ``target`` is a devlib/LISA target connected to it, else None."""
    conn = getattr(target, "conn", None)
    host, port = getattr(conn, "host", None), getattr(conn, "port", None)
    if host not in ("127.0.0.1", "localhost") or port is None:
        return None
    board = _board_class()()
    state = board.status()
    return board if state is not None and int(port) == state["ssh_port"] else None


# -- build and checks ---------------------------------------------------------

#: ``uname -m`` -> kernel architecture
_MACHINES = {"x86_64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}


def _build(spec_path: Path, arch: str):
    return build_variant(spec_path, log=log.info, arch=arch)


def _target_arch(target: Any) -> str:
    """The kernel architecture a variant must be built for to run on ``target``."""
    if isinstance(target, VirtualBoard):
        return target.arch
    if isinstance(target, (str, os.PathLike)):
        board = _conf_board(Path(target))
        if board is not None:
            return board.arch
        conf = _load_target_conf(Path(target))
        if conf.get("kind") == "android":
            return "arm64"
        machine = _SshShell(conf["host"], int(conf.get("port") or 22), conf.get("username") or "root",
                            conf.get("keyfile")).run("uname -m", timeout=60).strip()
    elif getattr(target, "os", None) == "android":
        return "arm64"
    else:
        board = _connected_board(target)
        if board is not None:
            return board.arch
        machine = _DevlibShell(target).run("uname -m", timeout=60).strip()
    if machine not in _MACHINES:
        raise DeployError(f"the target is a {machine!r} machine: lisa-ext builds kernels for "
                          f"{', '.join(sorted(set(_MACHINES.values())))}")
    return _MACHINES[machine]


def _release_dir(artefacts) -> Path:
    return find_release_dir(Path(artefacts.modules_dir), artefacts.release)


def modules_to_load(artefacts) -> list[str]:
    """``modprobe`` lines for the modules the variant loads at boot (the
    platform-emulation drivers), e.g. ``"lisa_emu_cpuidle table=rk3399"``.

    Taken from the spec (``artefacts.modules``); artefacts that do not say
    get every module installed out of tree (``extra/`` or ``updates/``).
    """
    named = getattr(artefacts, "modules", None)
    if named is not None:
        return [" ".join(m.modprobe_args()) if hasattr(m, "modprobe_args") else str(m) for m in named]
    if not getattr(artefacts, "modules_dir", None):
        return []
    release_dir = _release_dir(artefacts)
    found = []
    for sub in ("extra", "updates"):
        found += sorted(p.name.split(".ko")[0] for p in (release_dir / sub).rglob("*.ko*"))
    return found


def _expected(artefacts) -> dict[str, str | None]:
    return {
        "release": getattr(artefacts, "release", None),
        "version": getattr(artefacts, "version_string", None),
        "build_id": getattr(artefacts, "build_id", None),
    }


def _verify(expected: Mapping[str, str | None], running: Mapping[str, str | None], where: str) -> None:
    problems = [
        f"{what}: expected {want!r}, running {running.get(what)!r}"
        for what, want in expected.items()
        if want and running.get(what) and want != running.get(what)
    ]
    if expected.get("version") and not running.get("version"):
        problems.append("uname -v could not be read")
    if problems:
        raise DeployError(f"{where} runs another kernel than the one built: " + "; ".join(problems))


def _running_on_shell(shell: _Shell) -> dict[str, str | None]:
    running = probe_running_kernel(lambda command: shell.run(command, timeout=60))
    return {"release": running.release, "version": running.version,
            "boot_id": running.boot_id, "build_id": running.build_id}


def _apply_knobs(shell: _Shell, knobs) -> dict[str, str]:
    """The variant's runtime knobs, written for the boot and read back
    (:func:`lisa_ext.knobs.apply_knobs`: globs, bracketed choices, flag lists)."""
    try:
        return apply_knobs(ShellKnobTarget(shell), knobs or {})
    except KnobError as exc:
        raise DeployError(str(exc)) from None


# -- the three paths ----------------------------------------------------------

def _modules_tarball(artefacts, dest: Path, load: list[str]) -> Path:
    """The release's modules (without build/source links) plus the boot load list."""
    release_dir = _release_dir(artefacts)
    with tarfile.open(dest, "w:gz", compresslevel=3) as tar:
        for entry in sorted(release_dir.iterdir()):
            if entry.name in ("build", "source", MODULES_LOAD_FILE):
                continue
            tar.add(entry, arcname=entry.name)
        data = "".join(f"{m}\n" for m in load).encode()
        info = tarfile.TarInfo(MODULES_LOAD_FILE)
        info.size, info.mtime = len(data), int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return dest


def _kexec(shell: _Shell, artefacts, cmdline: str, load: list[str],
           wait_back: Callable[[str], None], where: str) -> dict[str, str | None]:
    before = _running_on_shell(shell)
    release = artefacts.release
    with tempfile.TemporaryDirectory(prefix="lisa-ext-kexec-") as tmp:
        shell.run(f"rm -rf {_REMOTE_DIR} && mkdir -p {_REMOTE_DIR}", timeout=60)
        image = f"{_REMOTE_DIR}/{Path(artefacts.image).name}"
        shell.push(Path(artefacts.image), image)
        if getattr(artefacts, "modules_dir", None):
            tarball = _modules_tarball(artefacts, Path(tmp) / "modules.tar.gz", load)
            shell.push(tarball, f"{_REMOTE_DIR}/modules.tar.gz")
            target_dir = shlex.quote(f"/lib/modules/{release}")
            # A real directory replaces any link to the previous variant's modules disk.
            shell.run(f"rm -rf {target_dir} && mkdir -p {target_dir} && "
                      f"tar -xzf {_REMOTE_DIR}/modules.tar.gz -C {target_dir}", timeout=900)
    quoted_cmdline = shlex.quote(cmdline)
    shell.run(f"kexec -s -l {image} --command-line={quoted_cmdline} "
              f"|| kexec -l {image} --command-line={quoted_cmdline}", timeout=300)
    # Detach kexec -e so this SSH command returns before the kernel is replaced.
    shell.run("sync; nohup sh -c 'sleep 1; kexec -e' >/dev/null 2>&1 &", timeout=60)
    log.info("%s: kexec into %s", where, release)
    wait_back(before["boot_id"] or "")
    after = _running_on_shell(shell)
    if after["boot_id"] == before["boot_id"]:
        raise DeployError(f"{where}: kexec -e did not reboot (same boot id {after['boot_id']})")
    return after


def _wait_ssh_shell(shell: _Shell, old_boot_id: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    time.sleep(3)
    while time.monotonic() < deadline:
        try:
            reconnect = getattr(shell, "reconnect", None)
            if reconnect is not None:
                reconnect()
            if shell.run("cat /proc/sys/kernel/random/boot_id", timeout=30).strip() != old_boot_id:
                return
        except Exception as exc:  # noqa: BLE001 -- devlib raises its own errors while the target reboots
            log.debug("target not back yet: %s", exc)
        time.sleep(3)
    raise DeployError(f"the target did not come back within {timeout:.0f} s after kexec")


def _fastboot(artefacts, serial: str | None, cmdline: str) -> dict[str, str | None]:
    """``fastboot boot`` an mkbootimg image of the arm64 kernel. Untested here (no phone)."""
    image = getattr(artefacts, "image", None)
    if getattr(artefacts, "arch", "arm64") != "arm64" or not image or not Path(image).is_file():
        raise DeployError("fastboot needs the arm64 Image of the variant (built for arm64)")
    adb = ["adb"] + (["-s", serial] if serial else [])
    fastboot = ["fastboot"] + (["-s", serial] if serial else [])
    with tempfile.TemporaryDirectory(prefix="lisa-ext-fastboot-") as tmp:
        boot_img = Path(tmp) / "boot.img"
        ramdisk = getattr(artefacts, "ramdisk", None)
        cmd = ["mkbootimg", "--kernel", str(image), "--cmdline", cmdline, "--header_version", "2",
               "--output", str(boot_img)]
        if ramdisk:
            cmd += ["--ramdisk", str(ramdisk)]
        dtb = getattr(artefacts, "dtb", None)
        if dtb:
            cmd += ["--dtb", str(dtb)]
        for step in (cmd, adb + ["reboot", "bootloader"], fastboot + ["boot", str(boot_img)],
                     adb + ["wait-for-device"]):
            proc = subprocess.run(step, capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                raise DeployError(f"{' '.join(step)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    out = subprocess.run(adb + ["shell", "uname -r; uname -v"], capture_output=True, text=True,
                         timeout=120).stdout.splitlines()
    return {"release": out[0].strip() if out else None, "version": out[1].strip() if len(out) > 1 else None,
            "boot_id": None, "build_id": None}


# -- entry points ---------------------------------------------------------------

def _runs_already(board, expected: Mapping[str, str | None], cmdline: str) -> bool:
    """The board runs this very build with this command line: no reboot needed."""
    running = board.running_kernel()
    return (running.cmdline == cmdline and running.release == expected["release"]
            and running.version == expected["version"]
            and (not expected["build_id"] or running.build_id == expected["build_id"]))


def _board_class():
    return VirtualBoard


def deploy_artefacts(target: Any, artefacts, *, method: str = "auto", label: str = "",
                     base_cmdline: str | None = None) -> dict[str, Any]:
    """Install already-built ``artefacts`` on ``target``; see :func:`deploy_variant`."""
    if method not in METHODS:
        raise UserError(f"deploy method {method!r} is not one of: {', '.join(METHODS)}")
    VirtualBoard = _board_class()
    reconnect = None
    if isinstance(target, (str, os.PathLike)):
        path = Path(target)
        board = _conf_board(path)
        if board is not None:
            target = board
        else:
            conf = _load_target_conf(path)
            if conf.get("kind") == "android":
                target = ("android", conf.get("device"))
            else:
                target = _SshShell(conf["host"], int(conf.get("port") or 22), conf.get("username") or "root",
                                   conf.get("keyfile"))
    elif not isinstance(target, VirtualBoard) and _connected_board(target) is not None:
        # A campaign's LISA target on the board: deploy through the board, then reconnect it.
        reconnect, target = target, _connected_board(target)
    variant_cmdline = str(getattr(artefacts, "cmdline", "") or "")
    load = modules_to_load(artefacts)
    expected = _expected(artefacts)
    started = time.time()
    provenance: dict[str, Any] = {
        "variant": label,
        "image": str(artefacts.image) if getattr(artefacts, "image", None) else None,
        "arch": getattr(artefacts, "arch", None),
        "expected": expected,
        "modules_loaded_at_boot": load,
    }

    if isinstance(target, VirtualBoard):
        board = target
        if getattr(artefacts, "arch", board.arch) != board.arch:
            raise DeployError(f"the kernel was built for {artefacts.arch}, the board is {board.arch} "
                              f"(lisa-ext vboard up --arch {artefacts.arch} boots the {artefacts.arch} board)")
        if method == "auto":
            method = "boot"
            if board.is_up() and _runs_already(board, expected, board.kernel_cmdline(variant_cmdline)):
                method = "already-running"
            elif board.is_up() and board.arch == "arm64":
                # a running arm64 board gets its kernels as a real one does, by kexec over SSH
                method = "kexec"
        if method == "already-running":
            shell = _BoardShell(board)
            running = _running_on_shell(shell)
        elif method == "boot":
            # A running board keeps its disk across the switch, as a real board's does.
            dtbs = getattr(artefacts, "dtbs", None)
            board.up(Path(artefacts.image), modules_dir=getattr(artefacts, "modules_dir", None),
                     release=artefacts.release, load=load, cmdline=variant_cmdline, label=label,
                     fresh_rootfs=not board.is_up(),
                     soc_dtb=Path(dtbs) / f"{board.settings.soc}.dtb" if dtbs else None)
            shell: _Shell = _BoardShell(board)
            running = _running_on_shell(shell)
        elif method == "kexec":
            if not board.is_up():
                raise DeployError("kexec needs a running board: boot one first (lisa-ext vboard up)")
            shell = _BoardShell(board)
            cmdline = board.kernel_cmdline(variant_cmdline)
            running = _kexec(shell, artefacts, cmdline, load,
                             lambda old: board.wait_for_ssh(not_boot_id=old), "the virtual board")
            board.record_deploy(kernel=Path(artefacts.image), cmdline=cmdline, label=label, method="kexec")
        else:
            raise DeployError(f"the virtual board deploys by boot or kexec, not {method}")
        where = "the virtual board"
    elif isinstance(target, tuple) and target[0] == "android" or method == "fastboot" or \
            getattr(target, "os", None) == "android":
        serial = target[1] if isinstance(target, tuple) else getattr(getattr(target, "conn", None), "device", None)
        running = _fastboot(artefacts, serial, variant_cmdline)
        method, where, shell = "fastboot", f"Android device {serial or '(default)'}", None
    else:
        shell = target if isinstance(target, _SshShell) else _DevlibShell(target)
        if method not in ("auto", "kexec"):
            raise DeployError(f"a Linux target over SSH deploys by kexec, not {method}")
        method, where = "kexec", "the target"
        if base_cmdline is None:
            base_cmdline = shell.run("cat /proc/cmdline", timeout=60).strip()
        cmdline = f"{base_cmdline} {variant_cmdline}".strip()
        running = _kexec(shell, artefacts, cmdline, load, lambda old: _wait_ssh_shell(shell, old), where)

    _verify(expected, running, where)
    if reconnect is not None and method != "already-running":
        # the old connection died with the old kernel (~5 s to re-probe the target on the board)
        reconnect.connect()
    knobs = getattr(artefacts, "knobs", None)
    provenance.update(
        method=method,
        running=running,
        deploy_seconds=round(time.time() - started, 1),
        knobs=_apply_knobs(shell, knobs) if shell is not None else {},
    )
    log.info("%s runs %s (%s) after %s in %.1f s", where, running["release"], running["version"],
             method, provenance["deploy_seconds"])
    return provenance


def deploy_variant(target: Any, spec_path: str | os.PathLike, *, method: str = "auto") -> dict[str, Any]:
    """Build the kernel variant ``spec_path`` (cached), install it on ``target``,
    boot it, verify it runs, apply its runtime knobs; return the provenance.

    ``target`` is a :class:`~lisa_ext.vboard.board.VirtualBoard`, a path to a
    LISA target_conf YAML (``target-configs/vboard.yml`` means the virtual
    board), or a connected devlib/LISA target (one connected to the virtual
    board is recognised by its port, and reconnected after the switch).
    ``method`` is ``auto``, ``boot``, ``kexec`` or ``fastboot``. ``auto`` means:
    on the virtual board, nothing when it already runs this build with this
    command line (``"already-running"``, knobs still applied), else boot; kexec
    for other Linux targets; fastboot for Android.
    """
    spec_path = Path(spec_path)
    artefacts = _build(spec_path, _target_arch(target))
    label = str(getattr(artefacts, "name", "") or spec_path.stem)
    provenance = deploy_artefacts(target, artefacts, method=method, label=label)
    provenance["spec"] = str(spec_path)
    return provenance
