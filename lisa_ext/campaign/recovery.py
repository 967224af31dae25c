"""Faults of the target during a campaign: lost mid-run, or a kernel variant that does not boot.

*Target lost* (board hangs, QEMU dies, SSH drops, phone reboots): each run is
watched (:mod:`lisa_ext.campaign.health`); when the target is lost the attempt
is recorded with its reason (and, on the virtual board, the tail of the serial
console), the target is recovered, the run's kernel variant redeployed (its
knobs are applied again by the run itself and reverted at its end, as always)
and the run tried again, up to ``retries:`` of the campaign spec. A run that
still fails is stored as failed with every attempt's reason; the campaign goes
on. Recovery per kind of target:

* virtual board: stop what is left of QEMU, boot it again on the kernel the run
  needs (:func:`lisa_ext.kernel.deploy.deploy_variant`);
* Linux board: the optional ``lisa-ext: reset-command`` of its target config
  (a lab's PDU or relay command, run on this host), then wait for SSH;
* Android: ``adb wait-for-device`` then ``adb reboot`` (implemented, untested
  here: no phone on this machine).

*A variant that does not boot*: its deploy fails within the board's boot timeout
(at once when the kernel panics: QEMU runs with ``-no-reboot``), with the console
tail in the reason; the target is brought back on the last kernel that booted,
every run of that variant is stored as failed with that reason, and the
campaign continues with the other variants.

*A killed runner*: :class:`UndoJournal` notes in the store's journal, before each
change to the target, how to undo it (knobs, background processes, the ftrace
instance, cleanup commands, the run's directory on the target); the next
``--resume`` undoes what is left (:meth:`UndoJournal.undo`) and says what it did.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from lisa_ext import knobs as _knobs
from lisa_ext.campaign import health, remote, tracing
from lisa_ext.campaign.store import CampaignStore, RunKey, RunResult
from lisa_ext.campaign.workloads import make_workload
from lisa_ext.campaign.tools import install_cached_tools
from lisa_ext.errors import UserError
from lisa_ext.kernel.deploy import deploy_variant
from lisa_ext.target import is_virtual_board, target_extras
from lisa_ext.vboard import qemu
from lisa_ext.vboard.board import VirtualBoard

__all__ = ["CampaignFaults", "TargetLost", "UndoJournal", "VariantDidNotBoot"]

log = logging.getLogger(__name__)

_CONSOLE_LINES = 40


class TargetLost(RuntimeError):
    """The target stopped answering during a run."""


class VariantDidNotBoot(UserError):
    """The kernel of a variant did not come up; its runs are failed with this reason."""


class UndoJournal:
    """What the run in progress changed on the target, written to the store's journal
    (:class:`lisa_ext.campaign.store.Journal`) before each change, and how to undo it."""

    def __init__(self, store: CampaignStore, target):
        self.store = store
        self.target = target
        self.data: dict = {}

    def begin(self, key: RunKey, scratch: Path, remote_dir: str, instance: str) -> None:
        self.data = {"run": str(key), "tmp": str(scratch), "remote_dir": remote_dir,
                     "instance": instance, "knobs": {}, "processes": [], "runner_pid": os.getpid(),
                     "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")}
        self.store.journal.write(self.data)

    def set_knobs(self, originals: dict) -> None:
        self.data["knobs"] = originals
        self.store.journal.write(self.data)

    def add_cleanup(self, command: str) -> None:
        self.data.setdefault("cleanups", []).append(command)
        self.store.journal.write(self.data)

    def add_pid(self, pid: int) -> None:
        self.data["processes"].append({"pid": pid, "starttime": remote.process_starttime(self.target, pid)})
        self.store.journal.write(self.data)

    def undo(self, tracefs: str | None, *, restore_knobs: bool = True) -> list[str]:
        """Undo what the journal says a stopped run left on the target, clear the journal and
        return what was done, in words. ``restore_knobs=False`` after a reboot, which took
        the knobs with it (writing them back could fail on a file that reads back otherwise)."""
        data = self.store.journal.read()
        self.data = {}
        if data is None:
            return []
        if "damaged" in data:
            self.store.journal.clear()
            return [f"the journal of the interrupted run was damaged, nothing undone from it: {data['damaged']}"]
        done = []
        target = self.target
        for proc in data.get("processes", []):
            pid = int(proc["pid"])
            if proc.get("starttime") and remote.process_starttime(target, pid) == proc["starttime"]:
                remote.kill_leftover(target, pid)
                done.append(f"killed leftover process group {pid}")
        for command in data.get("cleanups", []):
            target.execute(command, as_root=True, check_exit_code=False)
            done.append(f"ran cleanup: {command}")
        if data.get("instance") and tracefs:
            tracing.remove_instance(target, tracefs, data["instance"])
        if restore_knobs:
            failures = _knobs.revert_knobs(target, data.get("knobs", {}))
            if failures:
                raise UserError("could not restore knobs left by the interrupted runner: " + "; ".join(failures))
            if data.get("knobs"):
                done.append("restored " + ", ".join(f"{p}={v}" for p, v in data["knobs"].items()))
        if data.get("remote_dir"):
            target.execute(f"rm -rf {remote.quote(data['remote_dir'])}", as_root=True, check_exit_code=False)
        if data.get("run"):
            key = RunKey.parse(data["run"])
            if key is not None and self.store.is_published(key):
                # killed between publishing the run and clearing the journal: the run is whole
                done.append(f"kept the run {data['run']}: it was complete and published when the "
                            "runner stopped")
            else:
                done.append(f"discarded the partial run {data['run']}")
        self.store.journal.clear()
        return done


@dataclass
class CampaignFaults:
    """Watches runs, recovers the target and retries; one per campaign run.

    It keeps which kernel the target runs (:attr:`deployed`): a recovery may boot another.
    """

    spec: Any  # lisa_ext.campaign.spec.CampaignSpec
    store: CampaignStore
    target: Any  # the connected LISA target, reconnected in place after a recovery
    journal: UndoJournal
    tracefs: str | None
    echo: Callable[[str], None]
    #: per-campaign values of the workloads (set up again after a recovery)
    campaign_state: dict
    retries: int = 1
    interval_s: float = 5.0
    misses: int = 3
    reset_command: str | None = None
    reset_timeout_s: float = 600.0
    attempts: dict = field(default_factory=dict)   # RunKey -> [attempt records]
    broken: dict = field(default_factory=dict)     # variant name -> why it did not boot
    last_good_kernel: Path | None = None
    #: (kernel variant spec, its deploy record) the target runs now; (None, None) before any deploy
    deployed: tuple[Path | None, Any] = (None, None)
    recoveries: list = field(default_factory=list)  # seconds each recovery took
    is_board: bool = False
    _watchdog: health.TargetWatchdog | None = None
    _main_conn: Any = None  # the runner's own connection: what the watchdog closes when the target is lost

    @classmethod
    def for_campaign(cls, spec, store: CampaignStore, target, journal: UndoJournal, tracefs: str | None,
                     echo: Callable[[str], None], campaign_state: dict) -> "CampaignFaults":
        """Settings from the spec (``retries``) and the target config's ``lisa-ext:`` mapping."""
        extras = target_extras(spec.target)
        return cls(spec, store, target, journal, tracefs, echo, campaign_state, retries=spec.retries,
                   interval_s=float(extras.get("probe-interval-s", 5.0)),
                   misses=int(extras.get("probe-misses", 3)),
                   reset_command=extras.get("reset-command"),
                   reset_timeout_s=float(extras.get("reset-timeout-s", 600.0)),
                   is_board=is_virtual_board(spec.target))

    # -- what kind of target -------------------------------------------------

    def _is_board(self) -> bool:
        return self.is_board

    def _board_object(self):
        return VirtualBoard()

    def console_tail(self) -> str | None:
        return self._board_object().serial_tail(_CONSOLE_LINES) if self._is_board() else None

    # -- one run ----------------------------------------------------------------

    def run(self, key: RunKey, attempt: Callable[[], RunResult]) -> RunResult:
        """Run ``attempt`` under the watchdog; on a lost target recover and try again."""
        for number in range(1, self.retries + 2):
            probe = (health.board_probe(self._board_object()) if self._is_board()
                     else health.devlib_probe(self.target))
            self._main_conn = self.target.conn
            self._watchdog = health.TargetWatchdog(
                probe, interval_s=self.interval_s, misses=self.misses,
                on_lost=lambda _reason: health.close_connection(self._main_conn))
            started = time.monotonic()
            try:
                with self._watchdog:
                    return attempt()
            except Exception as exc:
                if key.variant in self.broken:
                    return self._store_failed(key, self.broken[key.variant], [])
                reason = self._lost_reason(exc, probe)
                if reason is None:
                    raise
                record = {"attempt": number, "reason": reason, "error": f"{type(exc).__name__}: {exc}",
                          "after_s": round(time.monotonic() - started, 1), "lost_at_unix": round(time.time(), 1),
                          "console_tail": self.console_tail()}
                self.attempts.setdefault(key, []).append(record)
                self.echo(f"run {key}: {reason} (attempt {number} of {self.retries + 1}); "
                          "recovering the target")
                log.debug("attempt %d of %s lost", number, key, exc_info=True)
            finally:
                self._watchdog = None
            variant = self._variant(key)
            record["recovery_s"] = self.recover(variant.kernel or self.last_good_kernel)
        records = self.attempts[key]
        return self._store_failed(key, f"target lost in all {len(records)} attempts: "
                                  + "; ".join(f"#{r['attempt']}: {r['reason']}" for r in records), records)

    def before_commit(self, key: RunKey, meta: dict) -> None:
        """Runner hook: refuse to publish a run the watchdog saw the target lose; note earlier attempts."""
        if self._watchdog is not None and self._watchdog.lost:
            raise TargetLost(self._watchdog.lost)
        if key in self.attempts:
            meta["target_lost"] = self.attempts[key]

    def _lost_reason(self, exc: Exception, probe: health.Probe) -> str | None:
        if self._watchdog is not None and self._watchdog.lost:
            return self._watchdog.lost
        if isinstance(exc, TargetLost):
            return str(exc)
        if isinstance(exc, UserError):
            return None  # a stop the runner decided (knobs not reverted, storage full)
        # the run died on an error: is the target still there?
        for _ in range(self.misses):
            reason, fatal = probe(self.interval_s * 2)
            if reason is None:
                return None
            if fatal:
                break
            time.sleep(self.interval_s)
        return f"target lost: {reason}"

    def _variant(self, key: RunKey):
        return next(v for v in self.spec.variants if v.name == key.variant)

    def _store_failed(self, key: RunKey, error: str, records: list) -> RunResult:
        """A run the target could not do (lost every time, or its kernel does not boot)."""
        try:
            self.journal.undo(self.tracefs)
        except Exception as exc:  # noqa: BLE001 -- a target without a kernel that boots: nothing to undo
            log.warning("could not clean up after %s: %s", key, exc)
        meta = {"campaign": self.spec.name, "variant": key.variant, "workload": key.workload,
                "iteration": key.iteration, "target_lost": records}
        result = RunResult(self.spec.name, key.variant, key.workload, key.iteration, "failed", error, [])
        self.store.publish(key, meta, result)
        return result

    # -- kernel variants ----------------------------------------------------------

    def deploy(self, variant, do_deploy: Callable[[], dict]) -> dict:
        """Runner hook around a kernel deploy: remember what boots, fail fast on what does not."""
        if variant.name in self.broken:
            raise VariantDidNotBoot(self.broken[variant.name])
        with self._watchdog.paused() if self._watchdog is not None else contextlib.nullcontext():
            try:
                if self._is_board() and not self._board_object().is_up():
                    # nothing to switch from (the board is down): boot the variant, then reconnect
                    result = self._boot_board(variant.kernel)
                else:
                    result = do_deploy()
            except Exception as exc:
                reason = f"kernel variant {variant.name} did not boot: {type(exc).__name__}: {exc}"
                tail = self.console_tail()
                if tail and tail.splitlines()[-1] not in reason:
                    reason += f"\nconsole:\n{tail}"
                self.broken[variant.name] = reason
                self.echo(f"variant {variant.name} did not boot; its runs are marked failed")
                if self.last_good_kernel is not None:
                    self.recover(self.last_good_kernel, cleanup=False)
                raise VariantDidNotBoot(reason) from None
            self._main_conn = self.target.conn  # deploy reconnected the runner's target
        self.last_good_kernel = variant.kernel
        self.deployed = (variant.kernel, result)
        return result

    # -- recovery -------------------------------------------------------------------

    def recover(self, kernel: Path | None, *, cleanup: bool = True) -> float:
        """Bring the target back (on ``kernel`` when given) and reconnect the runner; seconds taken.

        ``cleanup``: also undo the lost attempt (journal, partial run) and set the workloads up
        again; not when a deploy inside a run recovers (the run goes on and cleans up itself).
        """
        started = time.monotonic()
        if self._is_board():
            if kernel is None:
                raise UserError("the virtual board was lost and the campaign names no kernel variant "
                                "to boot it again; restart it (lisa-ext vboard up) and --resume")
            board = self._board_object()
            pid = qemu.running_pid(board.pidfile)
            if pid is not None:
                # a lost board: no clean shutdown to wait for (a hung QEMU answers neither SSH nor QMP)
                os.kill(pid, signal.SIGKILL)
            board.down()
            self.deployed = (kernel, self._boot_board(kernel))
        else:
            self._reset_board()
            self._reconnect()
            if kernel is not None:
                self.deployed = (kernel, deploy_variant(self.target, kernel))
        self._main_conn = self.target.conn
        if not cleanup:
            return self._took(started)
        # the journal of the lost attempt: leftover processes, trace instance, remote files; the
        # knobs went with the reboot
        self.journal.undo(self.tracefs, restore_knobs=False)
        self.store.remove_partial_runs()
        # the board comes back on a fresh disk: the binaries the user built are reinstalled
        install_cached_tools(self.target, {t for w in self.spec.workloads for t in make_workload(w).TOOLS})
        for w in self.spec.workloads:
            make_workload(w).setup_campaign(self.target, self.campaign_state)
        return self._took(started)

    def _took(self, started: float) -> float:
        took = round(time.monotonic() - started, 1)
        self.recoveries.append(took)
        self.echo(f"target recovered in {took:.0f} s")
        return took

    def _boot_board(self, kernel: Path) -> dict:
        result = deploy_variant(self._board_object(), kernel, method="boot")
        self._reconnect()
        return result

    def _reconnect(self) -> None:
        """Reconnect the runner's target object (the run holds it) and reinstall devlib's tools."""
        deadline = time.monotonic() + self.reset_timeout_s
        while True:
            try:
                self.target.connect()
                self.target.setup()
                return
            except Exception as exc:  # noqa: BLE001 -- devlib raises its own errors while booting
                if time.monotonic() > deadline:
                    raise UserError(f"the target did not come back within {self.reset_timeout_s:.0f} s: "
                                    f"{exc}") from None
                time.sleep(5)

    def _reset_board(self) -> None:
        target = self.target
        if getattr(target, "os", None) == "android":
            serial = getattr(getattr(target, "conn", None), "device", None)
            adb = ["adb"] + (["-s", serial] if serial else [])
            for step in (adb + ["wait-for-device"], adb + ["reboot"], adb + ["wait-for-device"]):
                subprocess.run(step, capture_output=True, timeout=self.reset_timeout_s, check=False)
            return
        if not self.reset_command:
            log.info("no lisa-ext: reset-command in %s: waiting for the target to come back by itself",
                     self.spec.target)
            return
        proc = subprocess.run(self.reset_command, shell=True, capture_output=True, text=True,
                              timeout=self.reset_timeout_s)
        if proc.returncode != 0:
            raise UserError(f"{self.spec.target}: lisa-ext.reset-command exited with "
                            f"{proc.returncode}: {(proc.stderr or proc.stdout).strip()}")

    def figures(self) -> dict:
        return {"attempts_lost": sum(len(a) for a in self.attempts.values()),
                "variants_not_booting": sorted(self.broken), "recoveries_s": self.recoveries}


