"""energy against a plain-Python walk of ``trace-cmd report`` text, on LISA's Juno trace."""

import json
import subprocess
import sys

import pytest

import analysis_reference as ref
from analysis_loaders import JUNO, fast_trace, lisa_trace, reference_events, require_shared
from lisa_ext.analysis.energy import BUSY
from lisa_ext.energy_model import load_model, model_from_dict, parse_target_dump
from lisa_ext.errors import SpecError, UserError

JUNO_MODEL = ref.REPO / "lisa_ext/analysis/data/juno_r0_energy.json"


@pytest.fixture(scope="module")
def model_dict():
    return json.loads(JUNO_MODEL.read_text())


@pytest.fixture(scope="module")
def expected(model_dict):
    require_shared(JUNO)
    return ref.energy_mj(reference_events(str(JUNO)), model_dict)


@pytest.fixture(scope="module", params=["lisa", "fast"])
def juno(request):
    require_shared(JUNO)
    return lisa_trace(str(JUNO)) if request.param == "lisa" else fast_trace(str(JUNO))


def test_summary_matches_reference(juno, expected):
    got = juno.ana.energy.summary(model=str(JUNO_MODEL))
    start, end = expected["window_ns"]
    assert got["window_s"] == pytest.approx([start / 1e9, end / 1e9], abs=1e-9)
    assert {int(k) for k in got["cpus"]} == set(expected["cpus"]) == {0, 1, 2, 3, 4, 5}
    for cpu, mj in expected["cpus"].items():
        assert got["cpus"][str(cpu)] == pytest.approx(mj, rel=1e-9), cpu
    assert got["clusters"] == pytest.approx(expected["clusters"], rel=1e-9)
    assert got["total_energy_mj"] == pytest.approx(expected["total"], rel=1e-9)
    assert got["model"] == load_model(JUNO_MODEL).to_dict()


def test_window_matches_reference(juno, model_dict):
    start_ns, end_ns = 2084_100_000_000, 2084_300_000_000
    want = ref.energy_mj(reference_events(str(JUNO)), model_dict, window_ns=(start_ns, end_ns))
    got = juno.ana.energy.summary(model=str(JUNO_MODEL), window=(start_ns / 1e9, end_ns / 1e9))
    assert got["window_s"] == [2084.1, 2084.3]
    assert got["total_energy_mj"] == pytest.approx(want["total"], rel=1e-6)
    for cpu, mj in want["cpus"].items():
        assert got["cpus"][str(cpu)] == pytest.approx(mj, rel=1e-6, abs=1e-9), cpu
    with pytest.raises(UserError, match="not inside the trace"):
        juno.ana.energy.summary(model=str(JUNO_MODEL), window=(2000.0, 2084.3))


def test_residency_covers_the_window(juno):
    df = juno.ana.energy.df_residency()
    start, end = juno.ana.energy.window()
    per_cpu = df.groupby("cpu")["time_s"].sum()
    assert per_cpu.to_numpy() == pytest.approx([end - start] * 6, rel=1e-12)
    # The Juno trace has CPUs busy at several OPPs and in all three idle states.
    assert set(df["state"]) == {BUSY, 0, 1, 2}
    assert df.loc[df["state"] == BUSY, "freq_khz"].nunique() > 2


def test_missing_frequency_and_state_name_the_model(juno, model_dict, tmp_path):
    bad = json.loads(json.dumps(model_dict))
    del bad["clusters"]["a57"]["opp_mw"]["800000"]
    path = tmp_path / "no800.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(UserError, match=r"no800\.json: cluster 'a57' has no power for frequency 800000 kHz"):
        juno.ana.energy.summary(model=str(path))
    bad = json.loads(json.dumps(model_dict))
    del bad["clusters"]["a53"]["idle_mw"]["2"]
    path.write_text(json.dumps(bad))
    with pytest.raises(UserError, match=r"cluster 'a53' has no power for idle state 2"):
        juno.ana.energy.summary(model=str(path))
    bad = json.loads(json.dumps(model_dict))
    bad["clusters"]["a57"]["cpus"] = [1]
    path.write_text(json.dumps(bad))
    with pytest.raises(UserError, match=r"CPU2 is in no cluster"):
        juno.ana.energy.summary(model=str(path))


def test_model_file_errors(tmp_path):
    with pytest.raises(SpecError, match=r"clusters\.x\.cpus: expected a non-empty list"):
        model_from_dict({"clusters": {"x": {"cpus": [], "opp_mw": {}}}}, "m.json")
    with pytest.raises(SpecError, match=r"clusters\.x\.opp_mw\.fast: expected an integer key"):
        model_from_dict({"clusters": {"x": {"cpus": [0], "opp_mw": {"fast": 1}}}}, "m.json")
    with pytest.raises(SpecError, match=r"CPU0 is already in cluster 'x'"):
        model_from_dict({"clusters": {"x": {"cpus": [0], "opp_mw": {}}, "y": {"cpus": [0], "opp_mw": {}}}}, "m.json")
    path = tmp_path / "broken.json"
    path.write_text("{")
    with pytest.raises(SpecError, match="broken.json"):
        load_model(path)


def test_target_dump_parsing():
    """The text model_from_target reads, as a 6.12 guest prints it (EM debugfs in uW)."""
    em = "/sys/kernel/debug/energy_model"
    text = "\n".join([
        f"{em}/cpu0/cpus=0-1",
        f"{em}/cpu0/ps:408000/frequency=408000", f"{em}/cpu0/ps:408000/power=56100",
        f"{em}/cpu0/ps:600000/frequency=600000", f"{em}/cpu0/ps:600000/power=82500",
        "/sys/devices/system/cpu/cpu0/cpuidle/state0/name=WFI",
        "/sys/devices/system/cpu/cpu0/cpuidle/state1/name=cpu-sleep",
        "idle_mw=cpu0 WFI 10", "idle_mw=cpu0 cpu-sleep 0", "idle_mw=cpu1 WFI 10",
    ])
    model = parse_target_dump(text, "vboard")
    assert model.to_dict() == {"clusters": {"pd0": {"cpus": [0, 1], "opp_mw": {"408000": 56.1, "600000": 82.5},
                                                   "idle_mw": {"0": 10.0, "1": 0.0}}}}
    with pytest.raises(UserError, match="vboard: no Energy Model"):
        parse_target_dump("", "vboard")


def test_model_from_a_target_without_energy_model():
    """This machine (x86, no cpufreq) has no Energy Model: reading it names the target config."""
    from lisa_ext.analysis.energy import resolve_model

    local = ref.REPO / "target-configs/local.yml"
    with pytest.raises(UserError, match=rf"{local}: no Energy Model in /sys/kernel/debug/energy_model"):
        resolve_model(local)


def test_cli_json(expected):
    out = subprocess.run([sys.executable, "-m", "lisa_ext.cli", "analyse", "energy", str(JUNO),
                          "--model", str(JUNO_MODEL), "--json"], capture_output=True, text=True, check=True).stdout
    got = json.loads(out)
    assert set(got) >= {"model", "cpus", "clusters", "total_energy_mj"}
    assert got["total_energy_mj"] == pytest.approx(expected["total"], rel=1e-9)
    missing = subprocess.run([sys.executable, "-m", "lisa_ext.cli", "analyse", "energy", str(JUNO)],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "--model" in missing.stderr


def test_plot_energy(juno, expected):
    bars = juno.ana.energy.plot_energy(str(JUNO_MODEL), by="cluster")
    assert bars.dimension_values("energy_mj").sum() == pytest.approx(expected["total"], rel=1e-9)
    assert set(bars.dimension_values("kind")) == {"busy", "idle"}
