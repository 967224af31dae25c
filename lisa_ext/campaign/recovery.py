"""Faults of the target during a campaign: lost mid-run, or a kernel variant that does not boot.

*Target lost* (board hangs, QEMU dies, SSH drops, phone reboots): each run is
watched (:mod:`lisa_ext.campaign.health`); when the target is lost the attempt
is recorded with its reason (and, on the virtual board, the tail of the serial
console), the target is recovered, the run's kernel variant redeployed (its
knobs are applied again by the run itself and reverted at its end, as always)
and the run tried again, up to ``retries:`` of the campaign spec. A run that
still fails is stored as failed with every attempt's reason; the campaign goes
on. Everything is done through the campaign's target session
(:mod:`lisa_ext.campaign.session`); how a target is brought back is its own
(:meth:`lisa_ext.target.Target.reset`):

* virtual board: stop what is left of QEMU, boot it again on the kernel the run
  needs;
* Linux board: the optional ``lisa-ext: reset-command`` of its target config
  (a lab's PDU or relay command, run on this host), then wait for SSH;
* Android: ``adb wait-for-device`` then ``adb reboot`` (implemented, untested
  here: no phone on this machine).

*A variant that does not boot*: its deploy fails within the board's boot timeout
(at once when the kernel panics: QEMU runs with ``-no-reboot``), with the console
tail in the reason; the target is brought back on the last kernel that booted,
every run of that variant is stored as failed with that reason, and the
campaign continues with the other variants.

*A killed runner*: the session notes in the store's journal, before each change
to the target, how to undo it (knobs, background processes, the ftrace instance,
cleanup commands, the run's directory on the target); the next ``--resume``
undoes what is left (:func:`undo_stopped_run`) and says what it did.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from lisa_ext.campaign import health
from lisa_ext.campaign.session import TargetSession
from lisa_ext.campaign.store.records import RunKey, RunResult
from lisa_ext.campaign.store.writer import CampaignStore
from lisa_ext.campaign.workloads import make_workload
from lisa_ext.campaign.tools import install_cached_tools
from lisa_ext.errors import UserError

__all__ = ["CampaignFaults", "TargetLost", "VariantDidNotBoot", "undo_stopped_run"]

log = logging.getLogger(__name__)

_CONSOLE_LINES = 40


class TargetLost(RuntimeError):
    """The target stopped answering during a run."""


class VariantDidNotBoot(UserError):
    """The kernel of a variant did not come up; its runs are failed with this reason."""


def undo_stopped_run(session: TargetSession, store: CampaignStore, *, restore_knobs: bool = True) -> list[str]:
    """Undo what a stopped run left on the target (:meth:`TargetSession.undo`) and say what
    became of the run itself; returns what was done, in words."""
    run = (store.journal.read() or {}).get("run")
    done = session.undo(restore_knobs=restore_knobs)
    if run:
        key = RunKey.parse(run)
        if key is not None and store.is_published(key):
            # killed between publishing the run and clearing the journal: the run is whole
            done.append(f"kept the run {run}: it was complete and published when the runner stopped")
        else:
            done.append(f"discarded the partial run {run}")
    return done


@dataclass
class CampaignFaults:
    """Watches runs, recovers the target and retries; one per campaign run. Everything it does
    to the target goes through the campaign's :class:`TargetSession` (which also keeps which
    kernel the target runs: a recovery may boot another)."""

    spec: Any  # lisa_ext.campaign.spec.CampaignSpec
    store: CampaignStore
    session: TargetSession
    echo: Callable[[str], None]
    #: per-campaign values of the workloads (set up again after a recovery)
    campaign_state: dict
    retries: int = 1
    interval_s: float = 5.0
    misses: int = 3
    attempts: dict = field(default_factory=dict)   # RunKey -> [attempt records]
    broken: dict = field(default_factory=dict)     # variant name -> why it did not boot
    last_good_kernel: Path | None = None
    recoveries: list = field(default_factory=list)  # seconds each recovery took
    _watchdog: health.TargetWatchdog | None = None

    @classmethod
    def for_campaign(cls, spec, store: CampaignStore, session: TargetSession, echo: Callable[[str], None],
                     campaign_state: dict) -> "CampaignFaults":
        """Settings from the spec (``retries``) and the target config's ``lisa-ext:`` mapping."""
        extras = spec.target_config.extras
        return cls(spec, store, session, echo, campaign_state, retries=spec.retries,
                   interval_s=float(extras.get("probe-interval-s", 5.0)),
                   misses=int(extras.get("probe-misses", 3)))

    def _probe(self, timeout: float) -> tuple[str | None, bool]:
        """The target's probe, ``timeout`` stretched by its time scale: a busy guest on the virtual
        clock answers that many times slower (:attr:`lisa_ext.target.Target.time_scale`)."""
        return self.session.probe(timeout * self.session.target.time_scale)

    def console_tail(self) -> str | None:
        return self.session.console_tail(_CONSOLE_LINES)

    # -- one run ----------------------------------------------------------------

    def run(self, key: RunKey, attempt: Callable[[], RunResult]) -> RunResult:
        """Run ``attempt`` under the watchdog; on a lost target recover and try again."""
        for number in range(1, self.retries + 2):
            probe = self._probe
            self._watchdog = health.TargetWatchdog(
                probe, interval_s=self.interval_s, misses=self.misses,
                on_lost=lambda _reason: self.session.interrupt())
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
            undo_stopped_run(self.session, self.store)
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
        self.last_good_kernel = variant.kernel
        return result

    # -- recovery -------------------------------------------------------------------

    def recover(self, kernel: Path | None, *, cleanup: bool = True) -> float:
        """Bring the target back (on ``kernel`` when given) and reconnect; seconds taken.

        ``cleanup``: also undo the lost attempt (journal, partial run) and set the workloads up
        again; not when a deploy inside a run recovers (the run goes on and cleans up itself).
        """
        started = time.monotonic()
        self.session.recover(kernel)
        if not cleanup:
            return self._took(started)
        # the journal of the lost attempt: leftover processes, trace instance, remote files; the
        # knobs went with the reboot
        undo_stopped_run(self.session, self.store, restore_knobs=False)
        self.store.remove_partial_runs()
        # the board comes back on a fresh disk: the binaries the user built are reinstalled
        lisa = self.session.lisa
        install_cached_tools(lisa, {t for w in self.spec.workloads for t in make_workload(w).TOOLS})
        for w in self.spec.workloads:
            make_workload(w).setup_campaign(lisa, self.campaign_state)
        return self._took(started)

    def _took(self, started: float) -> float:
        took = round(time.monotonic() - started, 1)
        self.recoveries.append(took)
        self.echo(f"target recovered in {took:.0f} s")
        return took

    def figures(self) -> dict:
        return {"attempts_lost": sum(len(a) for a in self.attempts.values()),
                "variants_not_booting": sorted(self.broken), "recoveries_s": self.recoveries}


