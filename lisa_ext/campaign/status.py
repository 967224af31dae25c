"""Campaign status: which runs of a campaign directory are done, failed, missing or damaged."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from lisa_ext.campaign import host_load, trace_loss
from lisa_ext.campaign.runner import plan_runs
from lisa_ext.campaign.spec import load_spec
from lisa_ext.campaign.store.reader import DamagedRun
from lisa_ext.campaign.store.records import RunKey
from lisa_ext.campaign.store.writer import CampaignStore
from lisa_ext.errors import UserError

__all__ = ["CampaignStatus", "campaign_status"]


@dataclass
class CampaignStatus:
    name: str
    done: list[RunKey]
    failed: list[tuple[RunKey, str]]
    missing: list[RunKey]
    interrupted: str | None
    """The run a killed runner left half-done, if any."""
    lost_events: dict[str, int] = field(default_factory=dict)
    """Runs (label -> events) whose traces lost events."""
    damaged: list[DamagedRun] = field(default_factory=list)
    """Run directories that are not readable runs (a truncated ``result.json``, ...)."""
    repaired: list[tuple[DamagedRun, Path]] = field(default_factory=list)
    """Damaged runs ``--repair`` moved aside, and where to."""
    directory: Path | None = None
    disturbed: dict[str, str] = field(default_factory=dict)
    """Runs (label -> why) the host's load may have disturbed (:mod:`lisa_ext.campaign.host_load`)."""

    def render(self) -> str:
        total = len(self.done) + len(self.failed) + len(self.missing) + sum(
            bad.key is not None for bad in self.damaged)
        lines = [f"moved the damaged run {bad.label} aside to {dest} ({bad.problem}); every other run "
                 "is kept, and --resume runs it again" for bad, dest in self.repaired]
        lines += [f"campaign {self.name}: {len(self.done)} done, {len(self.failed)} failed, "
                  f"{len(self.missing)} missing (of {total})"
                  + (f", {len(self.damaged)} damaged" if self.damaged else "")]
        lines += [f"  done     {k}{self._lost_mark(k)}{self._disturbed_mark(k)}" for k in self.done]
        lines += [f"  failed   {k}  {_headline(err)}{self._lost_mark(k)}{self._disturbed_mark(k)}"
                  for k, err in self.failed]
        lines += [f"  missing  {k}" for k in self.missing]
        lines += [f"  damaged  {bad.label}  {bad.problem}" for bad in self.damaged]
        if self.lost_events:
            lines.append(trace_loss.warning_line(self.lost_events))
        if self.disturbed:
            lines.append(host_load.warning_line(self.disturbed))
        if self.damaged:
            where = f" {self.directory}" if self.directory is not None else ""
            lines.append(f"damaged runs stop the report: `lisa-ext campaign status --repair{where}` moves "
                         "them aside (every other run is kept) and --resume runs them again")
        if self.interrupted:
            lines.append(f"interrupted during {self.interrupted}: run it again with --resume")
        return "\n".join(lines)

    def _lost_mark(self, key: RunKey) -> str:
        n = self.lost_events.get(str(key))
        return f"  [trace lost {n} events]" if n else ""

    def _disturbed_mark(self, key: RunKey) -> str:
        why = self.disturbed.get(str(key))
        return f"  [host load: {why}]" if why else ""


def _headline(error: str) -> str:
    """The first line of a run's error, and the panic line when a console tail follows it."""
    lines = error.splitlines() or [""]
    panic = next((line.strip() for line in lines[1:] if "Kernel panic" in line), None)
    return lines[0] + (f" [{panic}]" if panic else "")


def campaign_status(campaign_dir: str | os.PathLike, *, repair: bool = False) -> CampaignStatus:
    """The runs of a campaign directory against its spec copy; ``repair`` first moves damaged
    runs aside (:meth:`~lisa_ext.campaign.store.writer.CampaignStore.quarantine`)."""
    store = CampaignStore(campaign_dir)
    if not store.spec_copy.is_file():
        raise UserError(f"{campaign_dir} is not a campaign directory (no campaign.yml)")
    spec = load_spec(store.spec_copy, check_files=False)
    scan = store.scan()
    repaired = store.quarantine(scan.damaged) if repair else []
    if repaired:
        scan = store.scan()
    done, failed, missing = [], [], []
    lost = {}
    by_key = {run.key: run for run in scan.runs}
    damaged_keys = {bad.key for bad in scan.damaged}
    for key in sorted(plan_runs(spec)):
        run = by_key.get(key)
        if run is not None and (n := trace_loss.read_run_lost(run)):
            lost[str(key)] = n
        if run is None:
            if key not in damaged_keys:
                missing.append(key)
        elif run.ok:
            done.append(key)
        else:
            failed.append((key, run.error or ""))
    journal = store.journal.read()
    interrupted = None
    if journal is not None:
        interrupted = "an unknown run" if "damaged" in journal else journal.get("run")
    return CampaignStatus(spec.name, done, failed, missing, interrupted, lost, scan.damaged, repaired,
                          store.root, host_load.disturbed_runs(scan.runs))
