"""Put a kernel variant on a target, boot it, and prove that it is what runs.

The target boots the kernel its own way (:attr:`lisa_ext.target.Target.boot_methods`):

* ``boot`` -- the virtual board: restart QEMU with the variant's bzImage and a
  fresh modules disk;
* ``kexec`` -- any Linux target over SSH (the virtual board included): copy the
  kernel and its modules, ``kexec -s -l`` and ``kexec -e``, wait for the new
  boot id. This is the path a real Linux board uses: no bootloader or flashing;
* ``fastboot`` -- Android: ``fastboot boot`` of an mkbootimg image of the arm64
  Image (RAM only, nothing flashed). **Untested here**: this machine has no phone.

Whatever the path, the running kernel is then checked against the build:
``uname -r`` (release), ``uname -v`` (version string, which carries the build
number and timestamp) and, when both sides know it, the GNU build id read from
``/sys/kernel/notes``. A mismatch raises instead of letting a campaign measure
the wrong kernel. The variant's runtime knobs are written and read back last.

The variant is built for the architecture the target names
(:meth:`lisa_ext.target.Target.kernel_arch`: the virtual board's own, x86_64 or
arm64; ``uname -m`` of a Linux target; arm64 for Android).

:func:`deploy_variant` returns a provenance dict that campaigns store beside
their results.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Mapping

from lisa_ext.errors import UserError
from lisa_ext.kernel.build import build_status, build_variant
from lisa_ext.kernel.spec import load_variant_spec
from lisa_ext.knobs import KnobError, apply_knobs
from lisa_ext.running_kernel import RunningKernel, probe_running_kernel
from lisa_ext.staged_modules import find_release_dir
from lisa_ext.target import BootImage, FirstBoot, Target, TargetCommandError, open_target
from lisa_ext.workbench import workbench_path

__all__ = [
    "DeployError",
    "deploy_variant",
    "deploy_artefacts",
    "first_boot_missing",
    "modules_to_load",
    "METHODS",
]

log = logging.getLogger(__name__)

METHODS = ("auto", "boot", "kexec", "fastboot")


class DeployError(UserError):
    """The variant could not be installed, or another kernel runs than the one built."""


# -- build and checks ---------------------------------------------------------


def first_boot_missing(needs: FirstBoot, variant: Path | None = None, *, kernel_built: bool | None = None) -> list[str]:
    """What a target's first boot of ``variant`` (default: the target's own) must build and this
    cache lacks, each named as a note says it (``its kernel (kernels/…/baseline.yml)``, ``its
    QEMU``); empty when all is built. Unless ``kernel_built`` is given, the kernel's build status is
    looked up, and a variant spec that is refused raises its :class:`UserError`."""
    variant = Path(variant or needs.kernel_variant)
    if kernel_built is None:
        kernel_built = build_status(variant, needs.arch).built
    shown = variant.relative_to(workbench_path()) if variant.is_relative_to(workbench_path()) else variant
    return ([] if kernel_built else [f"its kernel ({shown})"]) + [f"its {name}" for name in needs.unbuilt]


def _build(spec_path: Path, arch: str):
    return build_variant(spec_path, log=log.info, arch=arch)


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


def _apply_knobs(target: Target, knobs) -> dict[str, str]:
    """The variant's runtime knobs, written for the boot and read back
    (:func:`lisa_ext.knobs.apply_knobs`: globs, bracketed choices, flag lists)."""
    try:
        return apply_knobs(target, knobs or {})
    except KnobError as exc:
        raise DeployError(str(exc)) from None


# -- entry points ---------------------------------------------------------------

def _running(target: Target) -> RunningKernel:
    return probe_running_kernel(lambda command: target.execute(command, as_root=True, timeout=60))


def _runs_already(running: RunningKernel | None, expected: Mapping[str, str | None], cmdline: str) -> bool:
    """The target runs this very build with this command line: no reboot needed."""
    return (running is not None and running.cmdline == cmdline and running.release == expected["release"]
            and running.version == expected["version"]
            and (not expected["build_id"] or running.build_id == expected["build_id"]))


def _boot_image(artefacts, label: str, load: list[str]) -> BootImage:
    def path(name: str) -> Path | None:
        value = getattr(artefacts, name, None)
        return Path(value) if value else None

    arch = str(getattr(artefacts, "arch", "x86_64"))
    return BootImage(kernel=path("image"), release=getattr(artefacts, "release", ""),
                     cmdline=str(getattr(artefacts, "cmdline", "") or ""), modules_dir=path("modules_dir"),
                     load=tuple(load), label=label, arm64_image=path("image") if arch == "arm64" else None,
                     ramdisk=path("ramdisk"), dtb=path("dtb"), arch=arch, soc_dtbs=path("dtbs"))


def _method(target: Target, method: str, running: RunningKernel | None, expected, cmdline: str) -> str:
    if method == "auto":
        if _runs_already(running, expected, cmdline):
            return "already-running"
        if not target.boot_methods:
            raise DeployError(f"{target.description} cannot boot another kernel: run its variants "
                              "with runtime knobs only")
        return target.boot_methods[0]
    if method not in target.boot_methods:
        how = ", ".join(target.boot_methods) or "no method"
        raise DeployError(f"{target.description} boots a kernel by {how}, not {method}")
    return method


def deploy_artefacts(target: Target, artefacts, *, method: str = "auto", label: str = "") -> dict[str, Any]:
    """Install already-built ``artefacts`` on ``target``; see :func:`deploy_variant`."""
    if method not in METHODS:
        raise UserError(f"deploy method {method!r} is not one of: {', '.join(METHODS)}")
    load = modules_to_load(artefacts)
    expected = _expected(artefacts)
    image = _boot_image(artefacts, label, load)
    started = time.time()
    provenance: dict[str, Any] = {
        "variant": label,
        "image": str(image.kernel) if image.kernel else None,
        "arch": image.arch,
        "expected": expected,
        "modules_loaded_at_boot": load,
    }
    before, cmdline = None, ""
    try:
        before = _running(target) if method == "auto" else None
        cmdline = target.kernel_cmdline(image.cmdline) if before is not None else ""
    except TargetCommandError:
        before = None  # not answering (a board that is down): nothing runs yet
    method = _method(target, method, before, expected, cmdline)
    if method != "already-running":
        try:
            fallback = target.boot(image, method)
        except TargetCommandError as exc:
            raise DeployError(str(exc)) from None
        if fallback is not None:
            provenance["fallback"] = {"from": method, "reason": fallback.reason}
            method = fallback.method
    # nothing booted: what was probed a moment ago still runs (one SSH round trip fewer per switch
    # between variants of one build)
    running = before if method == "already-running" else _running(target)
    where = target.description
    _verify(expected, {"release": running.release, "version": running.version,
                       "build_id": running.build_id}, where)
    provenance.update(
        method=method,
        running={"release": running.release, "version": running.version,
                 "boot_id": running.boot_id, "build_id": running.build_id},
        deploy_seconds=round(time.time() - started, 1),
        knobs=_apply_knobs(target, getattr(artefacts, "knobs", None)),
    )
    log.info("%s runs %s (%s) after %s in %.1f s", where, running.release, running.version,
             method, provenance["deploy_seconds"])
    return provenance


def deploy_variant(target: Target | str | os.PathLike, spec_path: str | os.PathLike, *,
                   method: str = "auto") -> dict[str, Any]:
    """Build the kernel variant ``spec_path`` (cached), install it on ``target``,
    boot it, verify it runs, apply its runtime knobs; return the provenance.

    ``target`` is a :class:`lisa_ext.target.Target` or a target config file
    (``target-configs/vboard.yml`` means the virtual board). ``method`` is
    ``auto``, ``boot``, ``kexec`` or ``fastboot``. ``auto`` means: nothing when
    the target already runs this build with this command line
    (``"already-running"``, knobs still applied), else the target's preferred
    way (the virtual board: boot; a Linux board: kexec; Android: fastboot).
    When the target got the kernel on by another method than the one tried (the
    virtual board restarts QEMU on a kernel whose kexec hung), the provenance's
    ``method`` is the one that worked and ``fallback`` says what was tried and why
    it failed.
    """
    if isinstance(target, (str, os.PathLike)):
        target = open_target(target)
    spec_path = Path(spec_path)
    # a spec that is refused starts nothing: the QEMU build beside the kernel's outlives this call
    load_variant_spec(spec_path)
    target.prepare_boot()
    artefacts = _build(spec_path, target.kernel_arch())
    label = str(getattr(artefacts, "name", "") or spec_path.stem)
    provenance = deploy_artefacts(target, artefacts, method=method, label=label)
    provenance["spec"] = str(spec_path)
    return provenance
