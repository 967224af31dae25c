"""Every study end to end at smoke size, as a user runs it: ``lisa-ext study run NAME --smoke``.

Each study's campaign runs on its platform (the virtual board; kernel variants built or
taken from the cache and deployed by the runner), its report is written and its notebook
executed into HTML. The page must hold the RFC's tables with ours beside them, no Python
warning, log line or traceback, every cell the study's module fills at full size must
be filled at smoke size too (the smoke: sections are sized for that), and the page check
(tests/page_check.py, headless Chromium) must find nothing a reader would trip over.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from lisa_ext.campaign.spec import load_spec
from lisa_ext.campaign.store.reader import read_campaign
from lisa_ext.rfc_numbers import load_rfc_numbers
from lisa_ext.studies import energy
from lisa_ext.study import find_study
from lisa_ext.trace.cli import stats
from perfetto_check import decode
import page_check
from vboard_helpers import BASELINE, REPO, require_board_capabilities
from workload_tools import install_built_tools

pytestmark = pytest.mark.vboard

LISA_EXT = Path(sys.executable).with_name("lisa-ext")
#: Smoke minutes on the board in one CI-like run from an empty cache on this 2-core machine (the
#: whole `.ci/run`: 74.9 min, 2026-11-30, with a second board running other board tests beside this
#: one): idle-gating 9.4, iowait-boost 7.9, wq-affinity 7.2, ondemand-bursty 7.0, teo-util 5.2. A run's
#: `meta.json` `phases_s` shows where its time goes (mostly the reboot between kernel variants,
#: trace-cmd starting/stopping and pgbench's server setup).
ALL_STUDIES = ["teo-util", "iowait-boost", "ondemand-bursty", "idle-gating", "wq-affinity"]


def _studies(split: str) -> list[str]:
    """The studies this process runs: ``LISA_EXT_TEST_SMOKE_STUDIES`` is how scripts/run-tests.sh
    shares them between two boards ("a,b": only those; "-a,b": all but those; unset: all)."""
    if not split:
        return ALL_STUDIES
    names = split.removeprefix("-").split(",")
    unknown = sorted(set(names) - set(ALL_STUDIES))
    if unknown:  # a misspelt name would otherwise drop a study from every process
        raise ValueError(f"LISA_EXT_TEST_SMOKE_STUDIES: unknown studies {unknown}; expected some of {ALL_STUDIES}")
    if split.startswith("-"):
        return [name for name in ALL_STUDIES if name not in names]
    return [name for name in ALL_STUDIES if name in names]


STUDIES = _studies(os.environ.get("LISA_EXT_TEST_SMOKE_STUDIES", ""))
#: what no executed notebook may show (fixed at the cause, never silenced)
NOISE = re.compile(r"Traceback|Warning:|WARNING|ERROR|DeprecationWarning|RuntimeWarning")


@pytest.fixture(scope="module")
def board():
    require_board_capabilities()
    from lisa_ext.kernel.deploy import deploy_variant
    from lisa_ext.target.board import BoardTarget
    from lisa_ext.vboard.board import VirtualBoard

    board = VirtualBoard()
    # the runner connects to the board before deploying a study's kernels: bring it up first
    deploy_variant(BoardTarget(board), BASELINE)
    # ondemand-bursty's sleeping ebizzy is not packaged: build it from ../shared/src and push
    # it, as a user does; the runner's kernel deploys (kexec) keep the board's disk
    from lisa_ext.target import connect

    install_built_tools(connect(REPO / "target-configs" / "vboard.yml"))
    yield board
    board.down()


def _outputs(executed: Path) -> str:
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                texts.append(out["text"])
            elif out.get("output_type") == "error":
                texts.append("Traceback " + out.get("ename", ""))
    return "\n".join(texts)


@pytest.mark.parametrize("name", STUDIES)
def test_study_runs_at_smoke_size(name, board, tmp_path):
    study = find_study(name)
    assert load_spec(study.spec, smoke=True).smoke
    data, html = tmp_path / "data", tmp_path / f"{name}.html"
    proc = subprocess.run([str(LISA_EXT), "study", "run", name, "--smoke", "--no-progress",
                           "--data", str(data), "--out", str(html)],
                          capture_output=True, text=True, cwd=REPO, timeout=1800)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\nserial console:\n{board.serial_tail(30)}"
    # a failed run leaves empty cells: say which run failed and why, not only which table is empty
    failed = [f"{r.variant}/{r.workload}/{r.iteration}: {r.error}" for r in read_campaign(data).failed_runs]
    assert not failed, f"{name}: failed runs:\n" + "\n".join(failed)
    page = html.read_text()
    noise = NOISE.findall(_outputs(html.with_suffix(".ipynb")))
    assert not noise, f"{name}: the executed notebook shows {sorted(set(noise))}"
    # the RFC's tables are on the page, and ours fill what the study's module promises
    module = importlib.import_module(f"lisa_ext.studies.{name.replace('-', '_')}")
    tables = module.rfc_tables(data)
    rfc = load_rfc_numbers(name)
    for table_id, ours in tables.items():
        assert rfc.table(table_id).title.split(" (")[0] in page
        assert isinstance(ours, pd.DataFrame) and ours.notna().any().any(), f"{name}/{table_id}: all empty"
    # what a reader of the page trips over, in headless Chromium (tests/page_check.py); the
    # RFC's own words are quoted as it wrote them (RFC 000's columns say "menu + iowait_boost")
    quoted = {word for table in rfc.tables for text in (table.row_header, *(c.name for c in table.columns),
                                                        *(row[0] for row in table.rows))
              for word in re.findall(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b", text)}
    check = page_check.check_page(html, smoke=True, allowed_header_words=sorted(quoted))
    assert check.seen["tables"] and (check.seen["svg_figures"] or check.seen["bokeh_plots"]), check.seen
    assert not check.findings, f"{name}: what a reader trips over on the page:\n{check.report()}"
    _check_perfetto_export(data, tmp_path)
    _check_meter_against_trace(data)


#: how far the trace's estimate of a run's power may be from the meter's, over the meter's window:
#: one model through two paths (the emulation module's counters, the trace's residencies)
METER_TOLERANCE = 0.10


def _check_meter_against_trace(data: Path) -> None:
    """On a metered, power-traced study the meter and the trace agree on each run's power: the
    oracle that caught the meter dividing its energy by the host's seconds on the virtual clock
    (a 4x gap on teo-util's smoke page)."""
    power = energy.df_run_power(data).dropna()
    for row in power.itertuples():
        assert abs(row.trace_power_mw / row.meter_power_mw - 1) <= METER_TOLERANCE, (
            f"{row.variant}/{row.workload}/{row.iteration}: meter {row.meter_power_mw:.1f} mW, "
            f"trace {row.trace_power_mw:.1f} mW")


def _check_perfetto_export(data: Path, tmp_path: Path) -> None:
    """A traced run of the study exports to Perfetto and decodes with Perfetto's protos:
    every event, in order per CPU, and the findings its trace allows (a few seconds)."""
    run = next(r for r in read_campaign(data).ok_runs if r.trace is not None)
    out = tmp_path / "run.pftrace"
    proc = subprocess.run([str(LISA_EXT), "trace", "export", "--perfetto", str(run.path), "-o", str(out)],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    decoded, expected = decode(out), stats(run.trace)
    assert dict(decoded.events) == {k: v for k, v in expected["events"].items() if v}
    assert decoded.monotonic_per_cpu() and decoded.num_cpus == expected["cpus"]
    groups = {name for name, parent, _ in decoded.tracks.values() if parent is None}
    events = {e for e, n in expected["events"].items() if n}
    if "cpu_idle_miss" in events:
        assert "idle misses" in groups, proc.stderr
    if "sched_switch" in events and events & {"sched_waking", "sched_wakeup"}:
        assert "wake-up latency" in groups, proc.stderr
    energy = json.loads((run.path / "meta.json").read_text()).get("energy") or {}
    if energy.get("model") and {"cpu_frequency", "cpu_idle"} <= events:
        assert "power (estimate)" in groups, proc.stderr
