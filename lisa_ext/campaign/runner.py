"""The campaign runner: every (variant, workload, iteration), traced, stored atomically.

Per run: apply the variant (kernel, then runtime knobs) -> prepare the workload
-> start trace-cmd in a private ftrace instance -> run the workload -> stop
tracing -> revert the knobs (always, failure included) -> publish the run
directory with one rename. A failed run is stored with its error and the
campaign goes on; only a knob that cannot be reverted stops it.

Runs are ordered ``interleave`` (each iteration visits every variant in turn,
v1 v2 v1 v2 ..., so slow drift of the machine spreads evenly over variants) or
``group-by-variant`` (all runs of a variant together, for variants that are
expensive to switch such as kernels; iterations stay interleaved across
workloads within a variant).

Crash safety: the campaign's target session (:mod:`lisa_ext.campaign.session`)
journals every change a run makes on the target before making it
(``.runner-journal.json``: the original knob values, the trace instance, the pid
and start time of every process it starts). If the runner is killed (even with
SIGKILL), the next ``run`` has the session undo what the journal records (kill
what is left, remove the instance, restore the knobs) and discards the partial
run, which is then run again; finished runs are never touched. The store
(:mod:`lisa_ext.campaign.store`) publishes each run and owns the journal's file.

:func:`run_campaign` is how every command runs a campaign (``campaign run``,
``study run``, ``quickstart``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import io
import logging
import os
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ruamel.yaml import YAML
from tqdm import tqdm

from lisa_ext import knobs as _knobs
from lisa_ext.campaign import (host_load, meters, recovery, remote, requirements, sched_ext, storage, trace_loss,
                               tracing)
from lisa_ext.campaign.cpu_util import CpuUtilWindow
from lisa_ext.campaign.session import TargetSession
from lisa_ext.campaign.spec import CampaignSpec, VariantSpec, stored_spec_matches
from lisa_ext.campaign.store.layout import RUN_TRACE, RUN_TRACE_LOG
from lisa_ext.campaign.store.records import Metric, RunKey, RunResult
from lisa_ext.campaign.store.writer import CampaignStore
from lisa_ext.campaign.tools import install_cached_tools, missing_tool_hint
from lisa_ext.campaign.workloads import RunContext, make_workload
from lisa_ext.compat import quiet_lisa_logs
from lisa_ext.errors import UserError
from lisa_ext.schema import load_yaml
from lisa_ext.target import kernel_provenance, lisa_platform_info, platform_provenance, tool_versions, tracefs_root
from lisa_ext.target.timing import emulation_params, timing_knobs, timing_of
from lisa_ext.trace import PLATFORM_FILE

__all__ = ["CampaignInterrupted", "CampaignRunner", "RunSummary", "SpecChanged", "plan_runs", "run_campaign"]

log = logging.getLogger(__name__)


class CampaignInterrupted(KeyboardInterrupt):
    """SIGINT (Ctrl-C) stopped the campaign: the target is restored and the finished runs kept;
    the message says so in one line."""


class SpecChanged(UserError):
    """The campaign directory holds runs of another spec: resuming would mix two campaigns."""


def plan_runs(spec: CampaignSpec) -> list[RunKey]:
    """Every run of the campaign, in the order the runner executes them."""
    runs = []
    if spec.order == "group-by-variant":
        for v in spec.variants:
            for i in range(spec.iterations):
                for w in spec.workloads:
                    runs.append(RunKey(v.name, w.name, i))
    else:
        for i in range(spec.iterations):
            for w in spec.workloads:
                for v in spec.variants:
                    runs.append(RunKey(v.name, w.name, i))
    return runs


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _add_phase(meta: dict, phase: str, since: float) -> None:
    """Add the seconds since ``since`` to ``meta["phases_s"][phase]``: where a run's time went."""
    phases = meta.setdefault("phases_s", {})
    phases[phase] = round(phases.get(phase, 0.0) + time.monotonic() - since, 3)


@contextlib.contextmanager
def _timed(meta: dict, phase: str) -> Iterator[None]:
    start = time.monotonic()
    try:
        yield
    finally:
        _add_phase(meta, phase, start)


@dataclass
class RunSummary:
    name: str
    campaign_dir: Path
    done: int
    failed: int
    skipped: int
    recovered: list[str]

    def line(self) -> str:
        """``campaign NAME: 3 runs done, 0 failed, 1 already done -> DIR``."""
        return (f"campaign {self.name}: {self.done} runs done, {self.failed} failed"
                + (f", {self.skipped} already done" if self.skipped else "") + f" -> {self.campaign_dir}")


def run_campaign(spec: CampaignSpec, campaign_dir: str | os.PathLike, *, resume: bool = True,
                 fresh: bool = False, progress: bool = True,
                 echo: Callable[[str], None] | None = None) -> RunSummary:
    """Run (or resume) a campaign (:func:`~lisa_ext.campaign.spec.load_spec`) into
    ``campaign_dir``: what ``campaign run``, ``study run`` and ``quickstart`` do.

    ``fresh`` deletes the directory's earlier runs first, when it is a campaign directory
    lisa-ext made (:meth:`CampaignStore.remove`); without ``resume`` a directory that holds
    runs already is an error.

    :raises SpecChanged: the directory holds runs of another spec.
    :raises UserError: ``fresh`` on a directory lisa-ext did not make.
    """
    spec.target_config  # a bad target config stops here, before anything runs
    campaign_dir = Path(campaign_dir)
    if fresh:
        CampaignStore(campaign_dir).remove()
    quiet_lisa_logs()
    return CampaignRunner(spec, campaign_dir, resume=resume, progress=progress, echo=echo).run()


def _spec_text(spec: CampaignSpec) -> str:
    """What the campaign directory keeps of ``spec``: the file itself when it ran as written,
    else the spec as applied (smoke: overrides, another target), so that a resume compares
    like with like and ``campaign status`` plans the runs that were run."""
    text = spec.path.read_text(encoding="utf-8")
    if stored_spec_matches(spec, load_yaml(spec.path, "campaign spec"), legacy=False):
        return text
    out = io.StringIO()
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False
    out.write(f"# {spec.path}, as run: " + ("its smoke: overrides applied" if spec.smoke else "on another target")
              + "\n")
    yaml.dump(spec.raw, out)
    return out.getvalue()


class CampaignRunner:
    """Runs (or resumes) one campaign into one campaign directory."""

    def __init__(self, spec: CampaignSpec, campaign_dir: str | os.PathLike, *,
                 resume: bool = False, progress: bool = True,
                 echo: Callable[[str], None] | None = None):
        self.spec = spec
        self.store = CampaignStore(campaign_dir)
        self.resume = resume
        self.progress = progress
        self.echo = echo or (lambda msg: print(msg, file=sys.stderr))
        self.session: TargetSession | None = None
        #: the session's LISA target (devlib), for workloads, tracing and tool installs; what the
        #: campaign does to the machine goes through the protocol's target, ``self.session.target``
        self.lisa_target = None
        self.tracefs: str | None = None
        self.meter: meters.Meter | None = None
        self.trace_cmd = "trace-cmd"
        self.state: dict = {}
        #: (boot id, or kernel variant off a deploy; knobs setting the spec's board timing)
        self._timing_knobs: tuple[str | Path | None, dict[str, str]] | None = None
        #: the last run's kernel provenance: within one boot, the next one reuses its config hash
        self._kernel_provenance: dict | None = None
        #: (kernel variant, LISA PlatformInfo read while it ran): capacities follow the kernel
        self._platform_info: tuple[Path | None, object] = (None, None)
        self._target_lock_fd: int | None = None
        #: (kernel variant, scheduler) -> the BPF scheduler's path on the target and its hash
        self._schedulers: dict[tuple[Path | None, str], tuple[str, str]] = {}

    # -- campaign directory -------------------------------------------------

    def _open_store(self) -> None:
        """Check the directory's spec copy against the spec (or write it), read the state."""
        store = self.store
        if store.spec_copy.exists():
            if not self.resume:
                raise UserError(f"{store.root} already holds campaign runs; pass --resume to continue it, "
                                "or remove the directory to start over")
            stored = store.read_spec_copy()
            if stored != self.spec.raw:
                if not stored_spec_matches(self.spec, stored):
                    raise SpecChanged(f"{self.spec.path} differs from the spec this campaign was started "
                                      f"with ({store.spec_copy}); resume with the same spec or use "
                                      "another directory")
                # the same runs: new report: settings, or a copy older versions wrote of the raw
                # spec of a smoke campaign
                store.write_spec_copy(_spec_text(self.spec))
                self.echo(f"resume: updated {store.spec_copy} to {self.spec.path} as applied (the same runs)")
        else:
            store.write_spec_copy(_spec_text(self.spec))
        self.state = store.read_state()
        self.state.setdefault("spec_source", str(self.spec.path))
        self.state.setdefault("target_config", str(self.spec.target))
        self.state.setdefault("created", _now())
        timing = self.state.setdefault("board_timing", self.spec.board_timing)
        if timing != self.spec.board_timing:
            # only runs that paid (or not) for the board's decisions bind a campaign to a timing: those
            # on a target without the emulation modules (this machine, a phone) recorded none
            if store.board_timings():
                raise UserError(f"{store.root} was run with board timing {timing}; resume it with --board-timing "
                                f"{timing}, or run {self.spec.board_timing} into another directory")
            self.state["board_timing"] = self.spec.board_timing

        # every run records its target's clock; runs from before it was recorded ran on the host's.
        # Runs bind the campaign to theirs: a spec that names none resumes on it, one that names
        # another is refused; without runs the spec's (None: the target's default) is asked for
        self.clock = self.spec.board_clock
        if store.has_runs():
            recorded = self.state.get("board_clock", "host")
            if self.clock not in (None, recorded):
                raise UserError(f"{store.root} was run on the {recorded} board clock; resume it with --board-clock "
                                f"{recorded}, or run {self.clock} into another directory")
            self.clock = recorded

    def _save_state(self) -> None:
        self.store.write_state(self.state)

    # -- target ---------------------------------------------------------------

    def _connect(self) -> None:
        self.session = TargetSession.open(self.spec.target_config, self.store.journal)
        self.lisa_target = self.session.lisa
        self.session.target.use_clock(self.clock)
        self.state["board_clock"] = self.session.target.clock
        problems = []
        if self.spec.trace is not None:
            self.tracefs = tracefs_root(self.lisa_target)
            if self.tracefs is None:
                problems.append("tracefs is not mounted on the target "
                                "(as root: mount -t tracefs nodev /sys/kernel/tracing)")
            else:
                missing = tracing.check_events(self.lisa_target, self.tracefs, self.spec.trace.events)
                if missing:
                    problems.append(f"trace events not available on the target: {', '.join(missing)}")
            if self.lisa_target.which("trace-cmd") is None:
                try:
                    self.lisa_target.install_tools(["trace-cmd"])
                except Exception as exc:
                    problems.append(f"trace-cmd is not on the target and LISA could not install it: {exc}")
        tools = {"trace-cmd"} if self.spec.trace else set()
        for tool in install_cached_tools(self.lisa_target, {t for w in self.spec.workloads
                                                       for t in make_workload(w).TOOLS}):
            self.echo(f"installed {tool} on the target from the tool cache")
        missing: dict[str, list[str]] = {}  # tool -> the workloads needing it
        for w in self.spec.workloads:
            for tool in make_workload(w).TOOLS:
                tools.add(tool)
                if tool in missing or self.lisa_target.which(tool) is None:
                    missing.setdefault(tool, []).append(w.name)
        for tool, names in missing.items():
            problems.append(f"{tool} (workload{'s' if len(names) > 1 else ''} {', '.join(names)}) is not "
                            f"installed on the target; {missing_tool_hint(tool, self.spec.target)}")
        for v in self.spec.variants:
            for p in _knobs.check_knobs(self.session.target, v.knobs):
                problems.append(f"variant {v.name}: {p}")
            scx_problem = v.sched_ext and sched_ext.preflight(self.lisa_target, v.sched_ext, v.kernel, self.echo)
            if scx_problem:
                problems.append(f"variant {v.name} ({v.sched_ext.scheduler}): {scx_problem}")
        if self.spec.requires and not any(v.kernel for v in self.spec.variants):
            problems += requirements.unmet_requirements(self.spec.requires,
                                                        requirements.platform_facts(self.session.target))
        try:
            self.meter = meters.open_meter(self.lisa_target, self.spec.energy, str(self.spec.target))
        except UserError as exc:
            problems.append(str(exc))
        if problems:
            raise UserError(f"{self.spec.path}: cannot run on {self.spec.target.name}: " + "; ".join(problems))
        self.faults = recovery.CampaignFaults.for_campaign(self.spec, self.store, self.session, self.echo,
                                                           self.state)
        self.platform = platform_provenance(self.lisa_target)
        if self.spec.target_config.description:  # how pages name the platform, from its config
            self.platform["description"] = self.spec.target_config.description
        self.tools = tool_versions(self.lisa_target, sorted(tools | {"rt-app"}))

    def _undo(self) -> list[str]:
        """Undo what a stopped run left on the target (:func:`~lisa_ext.campaign.recovery.undo_stopped_run`)."""
        return recovery.undo_stopped_run(self.session, self.store) if self.session is not None else []

    # -- one run ----------------------------------------------------------------

    def _board_timing_knobs(self, deployed: dict | None) -> dict[str, str]:
        """The knobs giving the board's emulation modules the spec's timing (none on a target
        without them), read once per boot: the modules load at boot, and variants of one build
        switch without one. ``deployed``: the run's kernel deploy provenance, if any."""
        boot = ((deployed or {}).get("running") or {}).get("boot_id") or self.session.kernel
        if self._timing_knobs is None or self._timing_knobs[0] != boot:
            self._timing_knobs = (boot, timing_knobs(emulation_params(self.session.target), self.spec.board_timing))
        return self._timing_knobs[1]

    def _deploy_kernel(self, variant: VariantSpec):
        if variant.kernel is None:
            return None
        if self.session.kernel == variant.kernel:
            return self.session.deploy(variant.kernel)

        result = self.faults.deploy(variant, lambda: self.session.deploy(variant.kernel))
        if self.spec.requires:
            problems = requirements.unmet_requirements(self.spec.requires,
                                                       requirements.platform_facts(self.session.target))
            if problems:
                raise requirements.RequirementError(
                    f"{self.spec.path}: kernel variant {variant.kernel.name} on {self.spec.target.name}: "
                    + "; ".join(problems))
        return result

    def _run_one(self, key: RunKey, index: int) -> RunResult:
        spec = self.spec
        variant = next(v for v in spec.variants if v.name == key.variant)
        wspec = variant.workload(next(w for w in spec.workloads if w.name == key.workload))
        workload = make_workload(wspec)
        lisa_target = self.lisa_target
        tmp = self.store.scratch(key)
        remote_dir = lisa_target.path.join(lisa_target.working_directory, "lisa-ext", spec.name,
                                           f"{key.variant}.{key.workload}.{key.iteration}")
        instance = f"{tracing.INSTANCE_PREFIX}{os.getpid()}"
        session = self.session
        session.begin(remote_dir, run=str(key), tmp=str(tmp))
        if self._traced_run(key):
            session.note_instance(self.tracefs, instance)
        lisa_target.execute(f"rm -rf {remote.quote(remote_dir)} && mkdir -p {remote.quote(remote_dir)}",
                            as_root=True)
        meta: dict = {
            "campaign": spec.name, "variant": key.variant, "workload": key.workload,
            "iteration": key.iteration, "order_index": index, "order": spec.order,
            "host": socket.gethostname(), "target_config": str(spec.target),
            "platform": self.platform, "tools": self.tools,
            "workload_kind": wspec.kind, "workload_options": wspec.options,
            "trace": None if not self._traced_run(key) else {
                "events": list(spec.trace.events), "instance": instance,
                "buffer_size_kb": spec.trace.buffer_size_kb},
            "campaign_state": {k: v for k, v in self.state.items() if k.startswith(("rtapp", "ebizzy"))},
            "start": _now(),
        }
        ctx = RunContext(lisa_target, remote_dir, tmp, session.note_pid, self.state, session.note_cleanup)
        status, error, metrics = "ok", None, []
        fatal: BaseException | None = None
        t0 = time.monotonic()
        try:
            with _timed(meta, "deploy"):
                kernel_result = self._deploy_kernel(variant)
            if variant.kernel is not None:
                meta["kernel_variant"] = {"spec": str(variant.kernel), "deploy": kernel_result}
            knobs_from = time.monotonic()
            # the variant's own knobs win over the board timing's
            knobs = {**self._board_timing_knobs(kernel_result), **variant.knobs}
            with session.applied_knobs(knobs) as knob_state:
                _add_phase(meta, "knobs", knobs_from)
                meta["knobs"] = knob_state
                with _timed(meta, "provenance"):
                    meta["kernel"] = self._kernel_provenance = kernel_provenance(session.target,
                                                                                 self._kernel_provenance)
                    meta["board_timing"] = timing_of(meta["kernel"]["emulation"])
                    self._write_platform_info(session.target, variant, tmp)
                    meta["board_clock"] = session.target.clock
                try:
                    with _timed(meta, "prepare"):
                        workload.prepare(ctx)
                    with self._sched_ext(variant, ctx, meta):
                        metrics = self._traced(workload, ctx, meta, instance)
                except BaseException:
                    # the run's own error is the one to record: a cleanup failing after it
                    # (often because of it) is kept beside it, not raised over it
                    try:
                        workload.cleanup(ctx)
                    except Exception as exc:
                        meta["cleanup_error"] = f"{type(exc).__name__}: {exc}"
                    raise
                with _timed(meta, "cleanup"):
                    workload.cleanup(ctx)
                knobs_from = time.monotonic()
            _add_phase(meta, "knobs", knobs_from)
        except (_knobs.KnobRevertError, requirements.RequirementError) as exc:
            status, error, fatal = "failed", f"{exc}", exc
        except Exception as exc:
            if storage.storage_cause(exc):
                raise  # the campaign directory is full: not this run's fault, see run()
            status, error = "failed", f"{type(exc).__name__}: {exc}".strip()
            log.debug("run %s failed", key, exc_info=True)
            (tmp / "error.txt").write_text(traceback.format_exc())
        finally:
            with _timed(meta, "pull"):
                self._pull_trace(remote_dir, tmp)
                lisa_target.execute(f"rm -rf {remote.quote(remote_dir)}", as_root=True, check_exit_code=False)
        meta["end"] = _now()
        meta["duration_s"] = round(time.monotonic() - t0, 3)
        trace_loss.record_lost_events(tmp, meta)
        self.faults.before_commit(key, meta)
        result = RunResult(spec.name, key.variant, key.workload, key.iteration, status, error, metrics)
        self.store.publish(key, meta, result, tmp)  # clears the journal too
        session.end()
        if fatal is not None:
            raise UserError(f"stopping the campaign: {fatal}")
        return result

    def _sched_ext(self, variant: VariantSpec, ctx: RunContext, meta: dict) -> contextlib.AbstractContextManager:
        """The variant's BPF scheduler around the workload (built and installed once per kernel),
        or a check that the kernel schedules on its own."""
        if variant.sched_ext is None:
            sched_ext.check_not_running(self.lisa_target, meta)
            return contextlib.nullcontext()
        key = (self.session.kernel, variant.sched_ext.scheduler, variant.sched_ext.version)
        if key not in self._schedulers:
            self._schedulers[key] = sched_ext.install_scheduler(self.lisa_target, variant.sched_ext, variant.kernel)
        binary, sha256 = self._schedulers[key]
        return sched_ext.running(self.lisa_target, variant.sched_ext, binary, sha256, ctx.remote_dir, ctx.local_dir,
                                 ctx.on_pid, meta)

    def _write_platform_info(self, target, variant: VariantSpec, run_dir: Path) -> None:
        """``platform.yml`` (LISA's PlatformInfo: capacities, frequency domains) beside the run's
        trace, read once per deployed kernel: what analyses of asymmetric CPUs need."""
        if self._platform_info[1] is None or self._platform_info[0] != variant.kernel:
            self._platform_info = (variant.kernel, lisa_platform_info(target))
        self._platform_info[1].to_yaml_map(str(run_dir / PLATFORM_FILE))

    def _traced_run(self, key: RunKey) -> bool:
        trace = self.spec.trace
        return trace is not None and trace.traces(key.workload, key.iteration)

    def _traced(self, workload, ctx: RunContext, meta: dict, instance: str) -> list[Metric]:
        trace = self.spec.trace
        traced = self._traced_run(RunKey(meta["variant"], meta["workload"], meta["iteration"]))
        # the meter's readings marked in the trace: the estimate from the trace prices that window
        marker = f"{self.tracefs}/instances/{instance}/trace_marker" if traced else None

        def run_workload() -> list[Metric]:
            with (meters.metered(self.meter, meta, marker) as energy, CpuUtilWindow(self.lisa_target) as util,
                  host_load.measured(self.lisa_target, meta, clock=self.session.target.clock,
                                     board_share=self.session.target.host_share)):
                meta["workload_start"] = _now()
                try:
                    with _timed(meta, "workload"):
                        metrics = workload.run(ctx)
                finally:
                    meta["workload_end"] = _now()
            meta["cpu_util"] = util.summary
            return [*metrics, *util.metrics(), *energy]

        if not traced:
            return run_workload()
        output = self.lisa_target.path.join(ctx.remote_dir, RUN_TRACE)
        tracing_from = time.monotonic()
        with tracing.recording(self.lisa_target, tracefs=self.tracefs, instance=instance,
                               events=trace.events, output=output,
                               buffer_size_kb=trace.buffer_size_kb, on_pid=self.session.note_pid,
                               on_cleanup=self.session.note_cleanup):
            _add_phase(meta, "tracing", tracing_from)
            metrics = run_workload()
            tracing_from = time.monotonic()
        _add_phase(meta, "tracing", tracing_from)
        return metrics

    def _pull_trace(self, remote_dir: str, tmp: Path) -> None:
        for name, local in ((RUN_TRACE, RUN_TRACE), (f"{RUN_TRACE}.log", RUN_TRACE_LOG)):
            src = self.lisa_target.path.join(remote_dir, name)
            if self.lisa_target.file_exists(src):
                self.lisa_target.pull(src, str(tmp / local))

    # -- the campaign -------------------------------------------------------------

    def _lock_target(self) -> None:
        """One campaign at a time on this machine: two would rewrite each other's knobs.

        Only for the local host (an flock, released by the kernel even on SIGKILL); campaigns
        on remote targets are not serialised.
        """
        if not self.session.target.this_machine:
            return
        lock_dir = "/run/lock" if os.access("/run/lock", os.W_OK) else "/tmp"
        path = os.path.join(lock_dir, "lisa-ext-campaign.lock")
        self._target_lock_fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(self._target_lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._target_lock_fd, 200, 0).decode(errors="replace").strip()
            self.echo(f"waiting for another campaign on this machine to finish ({holder or path})")
            fcntl.flock(self._target_lock_fd, fcntl.LOCK_EX)
        os.ftruncate(self._target_lock_fd, 0)
        os.pwrite(self._target_lock_fd, f"pid {os.getpid()}, campaign {self.store.root}\n".encode(), 0)

    def run(self) -> RunSummary:
        with self.store.locked():
            self._open_store()
            try:
                self._connect()
                self._lock_target()
                recovered = self._undo()
                for path in self.store.remove_partial_runs():
                    recovered.append(f"removed partial run directory {path}")
                scan = self.store.scan()
                for bad, moved in self.store.quarantine(scan.damaged):
                    recovered.append(f"moved the damaged run {bad.label} aside to {moved} "
                                     f"({bad.problem}); it is run again")
                for line in recovered:
                    self.echo(f"resume: {line}")
                done_before = scan.results()
                todo = [(i, k) for i, k in enumerate(plan_runs(self.spec)) if k not in done_before]
                if todo:
                    for w in self.spec.workloads:
                        make_workload(w).setup_campaign(self.lisa_target, self.state)
                    self._save_state()
                failed = self._run_all(todo)
                return RunSummary(self.spec.name, self.store.root, len(todo) - failed, failed,
                                  len(done_before), recovered)
            except Exception as exc:
                self._stop_if_storage(exc)
                raise
            except KeyboardInterrupt:
                raise self._interrupted() from None
            finally:
                if self._target_lock_fd is not None:
                    os.close(self._target_lock_fd)
                    self._target_lock_fd = None

    def _interrupted(self) -> CampaignInterrupted:
        """SIGINT: the run in progress reverted its knobs on the way out; undo what its journal still
        records (processes, trace instance, knobs again), discard it, keep every finished run."""
        try:
            undone = "; ".join(self._undo()) or "nothing left to undo on the target"
            self.store.remove_partial_runs(ignore_errors=True)
        except Exception as exc:  # noqa: BLE001 -- the journal stays: --resume undoes what is left
            undone = f"could not undo the run in progress on the target ({exc}); --resume does"
        return CampaignInterrupted(f"interrupted: {undone}; {len(self.store.scan().runs)} of "
                                   f"{len(plan_runs(self.spec))} runs kept in {self.store.root}")

    def _stop_if_storage(self, exc: Exception) -> None:
        """A full or read-only campaign directory: undo the partial run on the target, stop cleanly."""
        if storage.storage_cause(exc) is None:
            return
        if self.session is not None:
            try:
                self._undo()
            except Exception as cleanup_exc:  # noqa: BLE001 -- the journal stays for --resume
                log.warning("cleanup after the storage failure: %s", cleanup_exc)
        self.store.remove_partial_runs(ignore_errors=True)
        storage.raise_if_storage(exc, self.store.root, done=len(self.store.scan().runs),
                                 total=len(plan_runs(self.spec)), spec_path=self.spec.path,
                                 out=self.store.root)

    def _run_all(self, todo: list[tuple[int, RunKey]]) -> int:
        failed = 0
        bar = tqdm(total=len(todo), unit="run", desc=self.spec.name,
                   disable=not self.progress or not todo,
                   file=sys.stderr, dynamic_ncols=True)
        try:
            for index, key in todo:
                bar.set_postfix_str(str(key))
                result = self.faults.run(key, lambda: self._run_one(key, index))
                if result.status != "ok":
                    failed += 1
                    bar.write(f"run {key} failed: {result.error}", file=sys.stderr)
                bar.update(1)
        finally:
            bar.close()
        return failed
