"""``lisa-ext report`` on a real campaign directory made here from fio runs.

The campaign is written in the store layout (``lisa_ext/campaign/store/``):
real fio runs on this host, each under trace-cmd when tracing is possible, with
result.json holding fio's own figures. Two reports of the same campaign must
be byte-identical.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pandas as pd
import pytest

from lisa_ext.campaign.store.reader import read_campaign
from lisa_ext.cli import main
from lisa_ext.errors import SpecError, UserError

TRACEFS = Path("/sys/kernel/tracing")
VARIANTS = {"bs4k": "4k", "bs16k": "16k"}
EVENTS = ["sched:sched_switch", "sched:sched_wakeup", "sched:sched_waking", "power:cpu_idle",
          "power:cpu_frequency"]


def tracing_possible() -> str | None:
    """Why tracing cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root"
    if not (TRACEFS / "instances").is_dir():
        return f"no tracefs at {TRACEFS}"
    if shutil.which("trace-cmd") is None:
        return "trace-cmd is not installed"
    return None


def _fio_cmd(data: Path, bs: str, out: Path) -> list[str]:
    return ["fio", "--name=randread", f"--filename={data}", "--size=8M", "--rw=randread",
            f"--bs={bs}", "--ioengine=psync", "--runtime=1", "--time_based",
            "--output-format=json", f"--output={out}"]


def _run_once(run_dir: Path, data: Path, bs: str, traced: bool) -> None:
    fio_json = run_dir / "fio.json"
    cmd = _fio_cmd(data, bs, fio_json)
    if traced:
        instance = f"lisa_ext_report_{uuid.uuid4().hex[:8]}"
        events = [a for e in EVENTS for a in ("-e", e)]
        try:
            subprocess.run(["trace-cmd", "record", "--no-filter", "-d", "-q", "-B", instance,
                            *events, "-o", str(run_dir / "trace.dat"), "--", *cmd],
                           capture_output=True, text=True, timeout=120)
        finally:
            inst = TRACEFS / "instances" / instance
            if inst.exists():
                inst.rmdir()
        # trace-cmd may exit 1 on cleanup with complete data: judge by the files
        assert (run_dir / "trace.dat").stat().st_size > 0
    else:
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    read = json.loads(fio_json.read_text())["jobs"][0]["read"]
    return [
        {"name": "read IOPS", "value": float(read["iops"]), "unit": "IO/s", "lower_is_better": False},
        {"name": "read bandwidth", "value": read["bw"] / 1024.0, "unit": "MiB/s",
         "lower_is_better": False},
        {"name": "completion latency", "value": read["clat_ns"]["mean"] / 1000.0, "unit": "us",
         "lower_is_better": True},
    ]


def make_fio_campaign(root: Path, iterations: int = 3, traced: bool = True) -> Path:
    """A campaign of real fio runs in the store layout; returns its directory."""
    root.mkdir(parents=True)
    name = root.name
    (root / "campaign.yml").write_text(
        f"name: {name}\nvariants:\n" + "".join(f"  - name: {v}\n" for v in VARIANTS)
        + "workloads:\n  - name: fio-randread\n    kind: fio\n")
    data = root / "fio.data"
    for i in range(iterations):
        for variant, bs in VARIANTS.items():
            final = root / "runs" / variant / "fio-randread" / str(i)
            tmp = final.parent / f".tmp-{i}"
            tmp.mkdir(parents=True)
            metrics = _run_once(tmp, data, bs, traced)
            (tmp / "result.json").write_text(json.dumps(
                {"campaign": name, "variant": variant, "workload": "fio-randread",
                 "iteration": i, "status": "ok", "error": None, "metrics": metrics}))
            tmp.rename(final)
    data.unlink()
    return root


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    if shutil.which("fio") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("fio must be installed in CI (scripts/install-system-packages.sh)")
        pytest.skip("fio is not installed")
    why = tracing_possible()
    if why and os.environ.get("CI") == "true":
        pytest.fail(f"tracing must work in CI: {why}")
    root = tmp_path_factory.mktemp("campaigns") / "fio-bs"
    return make_fio_campaign(root, iterations=3, traced=why is None)


def _report(root: Path, *extra: str) -> dict[str, bytes]:
    assert main(["report", str(root), *extra]) == 0
    out = root / "report"
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def report_files(campaign) -> dict[str, bytes]:
    return _report(campaign)


def test_two_reports_are_byte_identical(campaign, report_files):
    again = _report(campaign)
    assert sorted(again) == sorted(report_files)
    for name, data in report_files.items():
        assert again[name] == data, f"{name} differs between two reports of the same campaign"


def test_report_has_every_table_and_figure(campaign, report_files):
    for name in ("README.md", "metrics.csv", "comparison.csv", "comparison.mmtests.txt",
                 "comparison.md", "comparison.lkp.txt", "comparison.sd.txt", "figures.html"):
        assert name in report_files
    for metric in ("read_IOPS", "read_bandwidth", "completion_latency"):
        for ext, magic in (("png", b"\x89PNG\r\n\x1a\n"), ("svg", b"<?xml ve")):
            name = f"figures/fio-randread_{metric}.{ext}"
            assert report_files[name][:8] == magic, name
    mmtests = report_files["comparison.mmtests.txt"].decode()
    assert mmtests.splitlines()[1].split() == ["bs4k", "bs16k"]
    assert any(line.startswith("Hmean     read IOPS") for line in mmtests.splitlines())
    assert b"<html" in report_files["figures.html"][:200].lower()


def test_metrics_are_fio_numbers(campaign, report_files):
    metrics = pd.read_csv(campaign / "report" / "metrics.csv")
    fio = metrics[~metrics["metric"].str.startswith("trace ")]
    assert len(fio) == 2 * 3 * 3
    for row in fio.itertuples():
        run = campaign / "runs" / row.variant / row.workload / str(row.iteration)
        read = json.loads((run / "fio.json").read_text())["jobs"][0]["read"]
        expected = {"read IOPS": read["iops"], "read bandwidth": read["bw"] / 1024.0,
                    "completion latency": read["clat_ns"]["mean"] / 1000.0}[row.metric]
        assert row.value == pytest.approx(expected, rel=1e-11)
    # hmean of the three IOPS runs, as the comparison reports it
    cmp = pd.read_csv(campaign / "report" / "comparison.csv")
    base = cmp[(cmp["variant"] == "bs4k") & (cmp["metric"] == "read IOPS")].iloc[0]
    values = fio[(fio["variant"] == "bs4k") & (fio["metric"] == "read IOPS")]["value"]
    assert base["mean"] == pytest.approx(len(values) / (1 / values).sum(), rel=1e-9)


def test_trace_metrics_and_figures_when_traced(campaign, report_files):
    if not any(campaign.rglob("trace.dat")):
        pytest.skip(f"runs were not traced: {tracing_possible()}")
    metrics = pd.read_csv(campaign / "report" / "metrics.csv")
    lat = metrics[metrics["metric"] == "trace wakeup latency mean"]
    assert len(lat) == 6 and (lat["value"] > 0).all()
    assert "figures/fio-randread_wakeup_latency_cdf.png" in report_files
    assert "figures/fio-randread_bs4k_timeline.svg" in report_files
    readme = report_files["README.md"].decode()
    # runs whose traces lack cpufreq/cpuidle events (this host has neither driver, though
    # cpu_idle fires now and then): the report says so instead of omitting them silently
    for source, figure in (("frequency_residency", "fio-randread_frequency_residency.png"),
                           ("idle_residency", "fio-randread_idle_residency.png")):
        assert f"figures/{figure}" in report_files or f"{source}: skipped" in readme


def _write_run(root: Path, variant: str, i: int, result: dict | str) -> None:
    run = root / "runs" / variant / "w" / str(i)
    run.mkdir(parents=True)
    (run / "result.json").write_text(result if isinstance(result, str) else json.dumps(result))


def _ok(variant: str, i: int, value: float) -> dict:
    return {"campaign": "c", "variant": variant, "workload": "w", "iteration": i, "status": "ok",
            "error": None, "metrics": [{"name": "m", "value": value, "unit": "s",
                                        "lower_is_better": True}]}


def test_failed_runs_are_listed_not_used(tmp_path):
    root = tmp_path / "c"
    # the values are not measurements: this checks the store reading, not statistics
    for i, v in enumerate([1.0, 1.1, 0.9]):
        _write_run(root, "a", i, _ok("a", i, v))
        _write_run(root, "b", i, _ok("b", i, v * 2))
    failed = _ok("b", 3, 100.0)
    failed.update(status="failed", error="fio: exited with 1\nmore text")
    _write_run(root, "b", 3, failed)
    (root / "runs" / "b" / "w" / ".tmp-4").mkdir()  # a run still being written
    campaign = read_campaign(root)
    assert [r.label for r in campaign.failed_runs] == ["b/w/3"]
    files = _report(root, "--no-traces", "--no-html")
    readme = files["README.md"].decode()
    assert "- `b/w/3`: fio: exited with 1" in readme
    metrics = pd.read_csv(root / "report" / "metrics.csv")
    assert 100.0 not in set(metrics["value"]) and len(metrics) == 6


def test_bad_store_files_name_file_and_field(tmp_path):
    root = tmp_path / "c"
    _write_run(root, "a", 0, "{not json")
    with pytest.raises(SpecError, match=r"a/w/0/result.json: line 1 column 2: not valid JSON"):
        read_campaign(root)
    shutil.rmtree(root)
    bad = _ok("a", 0, 1.0)
    bad["iteration"] = 1
    _write_run(root, "a", 0, bad)
    with pytest.raises(SpecError, match=r"result.json: iteration: is 1 but the directory says 0"):
        read_campaign(root)
    shutil.rmtree(root)
    bad = _ok("a", 0, 1.0)
    bad["metrics"][0]["value"] = "fast"
    _write_run(root, "a", 0, bad)
    with pytest.raises(SpecError, match=r"metrics\[0\].value: expected a finite number"):
        read_campaign(root)
    with pytest.raises(UserError, match="not a campaign directory"):
        read_campaign(tmp_path)


def test_damaged_trace_is_noted_not_fatal(tmp_path):
    root = tmp_path / "c"
    for i, v in enumerate([1.0, 1.1, 0.9]):  # store-reading check, values are not measurements
        _write_run(root, "a", i, _ok("a", i, v))
    whole = (Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "local" /
             "fio_randread_2cpu_v7.dat").read_bytes()
    (root / "runs" / "a" / "w" / "0" / "trace.dat").write_bytes(whole[: len(whole) // 3])
    files = _report(root, "--no-html")
    readme = files["README.md"].decode()
    assert "## Trace notes" in readme
    assert "trace warning:" in readme or "trace not read:" in readme
    assert "`a/w/0`" in readme


def test_a_metric_without_means_draws_its_runs_without_warnings():
    """One iteration of a metric that is 0 in every run: its gmean is undefined (NaN) for every
    variant. The figure shows the runs as dots, and numpy/holoviews warn about nothing (the
    smoke-size teo-util notebook printed ~40 "All-NaN slice" warnings from this figure)."""
    import warnings

    import numpy as np
    import pandas as pd

    import holoviews as hv

    from lisa_ext.report import figures

    hv.extension("matplotlib")
    cmp = pd.DataFrame({"variant": ["a", "b"], "mean": [np.nan, 3.0], "ci_low": [np.nan] * 2,
                        "ci_high": [np.nan] * 2, "is_baseline": [True, False],
                        "significant": [False, False], "too_few": [True, True]})
    runs = pd.DataFrame({"variant": ["a", "b"], "iteration": [0, 0], "value": [0.0, 3.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for block in (cmp, cmp.assign(mean=np.nan)):
            hv.render(figures.metric_bars_figure(block, "t", "u", runs), backend="matplotlib")


def test_the_specs_report_settings_are_the_defaults(tmp_path):
    root = tmp_path / "c"
    for i, v in enumerate([1.0, 1.1, 0.9]):  # store-reading check, values are not measurements
        _write_run(root, "a", i, _ok("a", i, v))
        _write_run(root, "b", i, _ok("b", i, v * 2))
    (root / "campaign.yml").write_text("name: c\nvariants:\n  - name: a\n  - name: b\n"
                                       "workloads:\n  - name: w\nreport: {baseline: b, mean: gmean, alpha: 0.1}\n")
    readme = _report(root, "--no-traces", "--no-html")["README.md"].decode()
    assert "Baseline `b`" in readme and "alpha=0.1" in readme and "Mean: gmean" in readme
    # an option given on the command line wins over the spec
    readme = _report(root, "--no-traces", "--no-html", "--baseline", "a")["README.md"].decode()
    assert "Baseline `a`" in readme and "Mean: gmean" in readme
