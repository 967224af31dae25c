"""Campaign status: which runs of a campaign directory are done, failed or missing."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from lisa_ext.campaign import trace_loss
from lisa_ext.campaign.runner import plan_runs
from lisa_ext.campaign.spec import load_spec
from lisa_ext.campaign.store import JOURNAL_NAME, CampaignStore, RunKey
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

    def render(self) -> str:
        total = len(self.done) + len(self.failed) + len(self.missing)
        lines = [f"campaign {self.name}: {len(self.done)} done, {len(self.failed)} failed, "
                 f"{len(self.missing)} missing (of {total})"]
        lines += [f"  done     {k}{self._lost_mark(k)}" for k in self.done]
        lines += [f"  failed   {k}  {_headline(err)}{self._lost_mark(k)}" for k, err in self.failed]
        lines += [f"  missing  {k}" for k in self.missing]
        if self.lost_events:
            lines.append(trace_loss.warning_line(self.lost_events))
        if self.interrupted:
            lines.append(f"interrupted during {self.interrupted}: run it again with --resume")
        return "\n".join(lines)


    def _lost_mark(self, key: RunKey) -> str:
        n = self.lost_events.get(str(key))
        return f"  [trace lost {n} events]" if n else ""


def _headline(error: str) -> str:
    """The first line of a run's error, and the panic line when a console tail follows it."""
    lines = error.splitlines() or [""]
    panic = next((line.strip() for line in lines[1:] if "Kernel panic" in line), None)
    return lines[0] + (f" [{panic}]" if panic else "")


def campaign_status(campaign_dir: str | os.PathLike) -> CampaignStatus:
    store = CampaignStore(campaign_dir)
    if not store.spec_copy.is_file():
        raise UserError(f"{campaign_dir} is not a campaign directory (no campaign.yml)")
    spec = load_spec(store.spec_copy, check_files=False)
    results = store.results()
    done, failed, missing = [], [], []
    lost = {}
    for key in sorted(plan_runs(spec)):
        r = results.get(key)
        if r is not None and (n := trace_loss.read_run_lost(store.run_dir(key))):
            lost[str(key)] = n
        if r is None:
            missing.append(key)
        elif r.status == "ok":
            done.append(key)
        else:
            failed.append((key, r.error or ""))
    journal = Path(campaign_dir) / JOURNAL_NAME
    interrupted = None
    if journal.is_file():
        try:
            interrupted = json.loads(journal.read_text() or "{}").get("run")
        except ValueError:
            interrupted = "an unknown run"
    return CampaignStatus(spec.name, done, failed, missing, interrupted, lost)
