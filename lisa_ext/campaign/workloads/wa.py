"""Android app benchmarks (Geekbench, PCMark Work) through Workload Automation (PyPI ``wlauto``).

WA 3 (github ARM-software/workload-automation) is the field's automation for
these apps: it installs the APK, drives the UI and extracts the scores. This
kind writes a one-job WA agenda for the campaign's Android target, runs
``wa run AGENDA -d OUTPUT -f`` on the host (WA talks to the phone over adb
itself, while our runner traces the phone), and turns the job's metrics into
ours with WA's own output API (``wa.RunOutput``: each metric has a name, value,
units and ``lower_is_better``).

UNTESTED HERE: this machine has no Android phone and ``wlauto`` is not a
dependency of lisa-ext (``pip install wlauto`` to use this kind; it brings its
own devlib pin, so a separate virtualenv with ``wa`` on PATH is the safer
choice - set ``wa-command`` to that virtualenv's ``bin/wa``). ``wa-command`` names the
``wa`` program only, never a command line: a campaign spec comes from colleagues, and
WA runs on the host. No genuine WA result directory was available to
test the conversion against, so there is no parser test either.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from ruamel.yaml import YAML

from lisa_ext.campaign.store.records import Metric
from lisa_ext.campaign.workloads.base import RunContext, Workload, WorkloadError
from lisa_ext.campaign.workloads.command import tail
from lisa_ext.errors import UserError
from lisa_ext.schema import TIMEOUT_S, Field, Number

__all__ = ["Wa", "wa_agenda", "wa_metrics"]


def wa_agenda(workload: str, params: dict, device_config: dict, iterations: int = 1) -> dict:
    """A WA 3 agenda running ``workload`` once on a generic Android device."""
    return {
        "config": {"device": "generic_android", "device_config": device_config,
                   "iterations": iterations, "augmentations": ["~~"]},
        "workloads": [{"name": workload, "params": params}],
    }


def wa_metrics(output_dir: str) -> list[Metric]:
    """Metrics of every job in a WA output directory, via WA's ``RunOutput``."""
    from wa import RunOutput  # optional dependency (wlauto), only present where this kind is used

    run = RunOutput(output_dir)
    metrics = []
    for job in run.jobs:
        if str(job.status) != "OK":
            raise WorkloadError(f"WA job {job.id} ({job.label}) ended {job.status}")
        for m in job.metrics:
            name = "".join(c if c.isalnum() else "_" for c in m.name).strip("_").lower()
            metrics.append(Metric(name, float(m.value), m.units or "", bool(m.lower_is_better)))
    if not metrics:
        raise WorkloadError(f"WA produced no metric in {output_dir}")
    return metrics


class Wa(Workload):
    KIND = "wa"
    TOOLS = ()  # WA runs on the host and installs the APK itself
    SCHEMA = {
        "workload": Field((str,), "WA workload name, e.g. geekbench, pcmark", True),
        "params": Field((dict,), "the WA workload's parameters, e.g. {version: 5.4.1}"),
        "device-config": Field((dict,), "WA device_config (default: {device: <the target's adb serial>})"),
        "wa-command": Field((str,), "the WA program on the host: wa on PATH (default) or an absolute "
                            "path ending in /wa, e.g. a virtualenv's bin/wa",
                            check=lambda v: None if re.fullmatch(r"wa|/[A-Za-z0-9_./+-]*/wa", v)
                            and ".." not in v.split("/") else
                            "expected wa or an absolute path ending in /wa (no arguments: the spec "
                            "names WA, not a command line)"),
        "timeout-s": Field(Number, "kill WA after this many seconds (default 1800)", bounds=TIMEOUT_S),
    }

    def _wa(self) -> list[str]:
        return [self.options.get("wa-command", "wa")]

    def setup_campaign(self, target, state: dict) -> None:
        if shutil.which(self._wa()[0]) is None:
            raise UserError(f"wa workload {self.name}: {self._wa()[0]!r} not found on the host "
                            "(pip install wlauto, ideally in its own virtualenv; then set wa-command)")
        if getattr(target, "os", None) != "android":
            raise UserError(f"wa workload {self.name}: needs an Android target, not {getattr(target, 'os', '?')}")

    def run(self, ctx: RunContext) -> list[Metric]:
        device_config = self.options.get("device-config") or {"device": getattr(ctx.target, "adb_name", None)}
        agenda = ctx.local_dir / "wa-agenda.yaml"
        with open(agenda, "w") as f:
            YAML(typ="safe").dump(wa_agenda(self.options["workload"], self.options.get("params", {}),
                                            device_config), f)
        output = ctx.local_dir / "wa-output"
        with open(ctx.local_dir / "wa.log", "w") as log:
            try:
                proc = subprocess.run(self._wa() + ["run", str(agenda), "-d", str(output), "-f"],
                                      stdout=log, stderr=subprocess.STDOUT,
                                      timeout=float(self.options.get("timeout-s", 1800)))
            except subprocess.TimeoutExpired:
                raise WorkloadError("WA did not finish in time and was killed") from None
        if proc.returncode != 0:
            raise WorkloadError(f"wa run exited with status {proc.returncode}: "
                                f"{tail((ctx.local_dir / 'wa.log').read_text(errors='replace'))}")
        return wa_metrics(str(output))
