"""Energy meters: reading formats, the spec option, and the pre-flight error on a meterless host."""

import pytest

from campaign_helpers import LISA_EXT, LOCAL_TARGET, write_spec
from lisa_ext.campaign.meters import METER_KINDS, Meter, metered, parse_hwmon, parse_pixel6
from lisa_ext.campaign.spec import load_spec
from lisa_ext.errors import SpecError


def test_parse_hwmon_uses_labels_else_paths():
    text = ("/sys/class/hwmon/hwmon0/energy1_input 123456 pd0\n"
            "/sys/class/hwmon/hwmon0/energy2_input 789 pd2\n"
            "/sys/class/hwmon/hwmon3/energy1_input 42 \n"
            "/sys/class/hwmon/hwmon4/energy1_input cat: read error\n")
    assert parse_hwmon(text) == {"pd0": 123456, "pd2": 789, "hwmon3/energy1_input": 42}


def test_parse_pixel6_energy_value():
    # Layout of the Pixel 6 ODPM IIO driver's energy_value (one file per PMIC).
    text = ("== /sys/bus/iio/devices/iio:device0/energy_value\n"
            "t=473245\n"
            "CH0(T=473245)[S2M_VDD_CPUCL2], 3009545470\n"
            "CH1(T=473245)[S3M_VDD_CPUCL1], 1080405032\n"
            "== /sys/bus/iio/devices/iio:device1/energy_value\n"
            "t=473250\n"
            "CH0(T=473250)[VSYS_PWR_DISPLAY], 1769434017\n")
    assert parse_pixel6(text) == {"S2M_VDD_CPUCL2": 3009545470, "S3M_VDD_CPUCL1": 1080405032,
                                  "VSYS_PWR_DISPLAY": 1769434017}


class _CounterFiles:
    """A target whose shell is this machine's, reading counters from files the test writes."""

    def __init__(self, tmp_path):
        self.dir = tmp_path

    def execute(self, command, as_root=False, check_exit_code=True):
        import subprocess

        return subprocess.run(["sh", "-c", command], capture_output=True, text=True).stdout


def test_metered_differences_and_meta(tmp_path):
    counters = {"pd0": tmp_path / "a", "pd2": tmp_path / "b"}
    counters["pd0"].write_text("1000000\n")
    counters["pd2"].write_text("5000000\n")
    command = "; ".join(f"printf '%s %s %s\\n' x \"$(cat {p})\" {n}" for n, p in counters.items())
    meter = Meter("hwmon", _CounterFiles(tmp_path), command, ("pd0", "pd2"))
    meta = {}
    with metered(meter, meta) as energy:
        counters["pd0"].write_text("3500000\n")
        counters["pd2"].write_text("5250000\n")
    got = {m.name: m.value for m in energy}
    assert got["energy_pd0_j"] == pytest.approx(2.5)
    assert got["energy_pd2_j"] == pytest.approx(0.25)
    assert got["energy_j"] == pytest.approx(2.75)
    assert got["power_mw"] == pytest.approx(1000 * 2.75 / meta["energy"]["duration_s"], rel=1e-3)
    assert meta["energy"]["meter"] == "hwmon"
    assert set(meta["energy"]["channels"]) == {"pd0", "pd2"}
    with metered(None, meta) as nothing:
        pass
    assert nothing == []


class _TargetClock(_CounterFiles):
    """A target whose ``date`` and ``/proc/uptime`` are files the test writes: a clock of its own,
    like the virtual board's, which need not run at the host's pace."""

    def __init__(self, tmp_path):
        super().__init__(tmp_path)
        self.date, self.uptime = tmp_path / "date-now", tmp_path / "uptime"
        (tmp_path / "bin").mkdir()
        fake_date = tmp_path / "bin" / "date"
        fake_date.write_text(f"#!/bin/sh\ncat {self.date}\n")
        fake_date.chmod(0o755)

    def set(self, date: str, uptime: str) -> None:
        self.date.write_text(date + "\n")
        self.uptime.write_text(f"{uptime} 0.00\n")

    def execute(self, command, as_root=False, check_exit_code=True):
        command = command.replace("/proc/uptime", str(self.uptime))
        return super().execute(f"PATH={self.dir / 'bin'}:$PATH; {command}", as_root, check_exit_code)


@pytest.mark.parametrize("dates,uptimes,seconds,clock", [
    (("1000.000000000", "1002.500000000"), ("50.00", "52.50"), 2.5, "date"),
    # the date set during the run: its jump is not time the target lived
    (("1000.000000000", "4600.000000000"), ("50.00", "52.50"), 2.5, "uptime"),
    # a date without nanoseconds (%N printed as is)
    (("1000.%N", "1002.%N"), ("50.00", "52.50"), 2.5, "uptime"),
])
def test_power_is_over_the_targets_own_time(tmp_path, dates, uptimes, seconds, clock):
    """On the virtual board's clock a busy guest lives seconds while the host lives more (or the
    other way round): the meter's power is its energy over the target's time between the reads."""
    counter = tmp_path / "counter"
    counter.write_text("1000000\n")
    target = _TargetClock(tmp_path)
    target.set(dates[0], uptimes[0])
    meter = Meter("hwmon", target, f"printf 'x %s pd0\\n' \"$(cat {counter})\"", ("pd0",))
    meta = {}
    with metered(meter, meta) as energy:
        counter.write_text("2000000\n")  # 1 J
        target.set(dates[1], uptimes[1])
    got = {m.name: m.value for m in energy}
    assert meta["energy"]["duration_s"] == pytest.approx(seconds)
    assert got["power_mw"] == pytest.approx(1000 / seconds)
    assert meta["energy"]["host_duration_s"] < 1.0 and clock in meta["energy"]["sampling"]


def test_a_target_without_a_clock_falls_back_to_the_hosts_and_says_so(tmp_path):
    counter = tmp_path / "counter"
    counter.write_text("1000\n")

    class NoClock(_CounterFiles):
        def execute(self, command, as_root=False, check_exit_code=True):
            return super().execute(command.replace("lisa-ext-clock", "no-clock"), as_root, check_exit_code)

    meter = Meter("hwmon", NoClock(tmp_path), f"printf 'x %s pd0\\n' \"$(cat {counter})\"", ("pd0",))
    meta = {}
    with metered(meter, meta):
        pass
    assert meta["energy"]["duration_s"] == meta["energy"]["host_duration_s"]
    assert "host's monotonic clock (the target's could not be read)" in meta["energy"]["sampling"]


def test_metered_marks_its_readings_in_the_trace(tmp_path):
    """The marker is written after the first reading and before the second (the trace's window
    of the meter), here into a plain file standing for the instance's trace_marker."""
    counter, marker = tmp_path / "counter", tmp_path / "trace_marker"
    counter.write_text("1000\n")
    meter = Meter("hwmon", _CounterFiles(tmp_path), f"printf 'x %s pd0\\n' \"$(cat {counter})\"", ("pd0",))
    meta = {}
    with metered(meter, meta, str(marker)):
        assert marker.read_text() == "lisa-ext-meter-start\n"
    assert marker.read_text() == "lisa-ext-meter-end\n"
    assert meta["energy"]["trace_markers"] == ["lisa-ext-meter-start", "lisa-ext-meter-end"]


def _spec(tmp_path, energy):
    return write_spec(tmp_path / "spec.yml", f"""\
name: metered
target: @TARGET@
iterations: 1
energy: {energy}
variants: [{{name: base}}]
workloads:
  - name: rt
    kind: rtapp
    duration-s: 1
    tasks: {{busy: {{duty-cycle-pct: 20, period-ms: 10}}}}
""")


def test_spec_energy_option(tmp_path):
    assert load_spec(_spec(tmp_path, "hwmon")).energy == "hwmon"
    assert "none" in METER_KINDS
    with pytest.raises(SpecError, match=r"spec.yml: energy \(line 4\): 'joulescope' is not one of: none, hwmon, pixel6"):
        load_spec(_spec(tmp_path, "joulescope"))


def test_unreadable_meter_is_a_preflight_error(tmp_path):
    """This machine has no hwmon energy counters: the campaign stops before any run."""
    import os
    import subprocess

    if any(os.path.exists(p) for p in ("/sys/class/hwmon",)) and subprocess.run(
            "ls /sys/class/hwmon/*/energy*_input", shell=True, capture_output=True).returncode == 0:
        pytest.skip("external: this machine has hwmon energy counters")
    out = tmp_path / "data"
    proc = subprocess.run([*LISA_EXT, "campaign", "run", str(_spec(tmp_path, "hwmon")), "--out", str(out),
                           "--no-progress"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert f"energy meter hwmon cannot be read on {LOCAL_TARGET}" in proc.stderr
    assert "energy*_input" in proc.stderr
    assert not list(out.glob("runs/*/*/*"))
