"""The emulated SoC's power model and energy meter on a real boot (QEMU TCG, ~30 s).

Boots the baseline kernel with the platform-emulation modules (RK3399: the
Cortex-A53 table on socket 0, the Cortex-A72 table on socket 1) from an
initramfs whose /init (tests/kernel_emu_init.c) records ``cpu_frequency`` and
``cpu_idle`` while it idles and runs a busy burst, and reads the hwmon energy
counters right before and right after, marking both reads in the trace.

Checked: the guest shows an Energy Model in debugfs whose powers are the
device-tree formula (computed here from the kernel tree's rk3399 device trees,
not from the module), the counters increase, and the meter agrees with the
trace estimate (lisa_ext.analysis.energy with the model read back from the
guest). Both price the same residencies with the same model through
independent paths (in-kernel integration at each transition with
local_clock() vs. ring buffer -> text -> analysis). The counters are read
between two trace markers at each end, so the meter's window lies between the
trace's inner window (START_1..END_0) and outer one (START_0..END_1): the
meter must fall between the two estimates, give or take TOLERANCE of the
metered total for the trace text's microsecond timestamps. /init first wakes
every CPU so that each CPU's state at the window's start is in the trace.

Measured while writing this test (3 boots, ~1.0-1.25 s windows, 278-313 mJ,
nearly all on the A72 policy running the burst): the meter always fell inside
the bracket, whose width was 0.6-1.8 % of the total (reading the counters
takes ~1 ms under TCG at ~1 W); the largest excursion past an estimate was
7 uJ (0.002 % of the total); meter minus the bracket's middle: -0.6 % to
+0.002 % of the total.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lisa_ext.trace import load_trace
from lisa_ext.energy_model import EMU_IDLE_POWER, parse_target_dump
from test_kernel_emulation import KERNELS, boot, build_variant, init_binary  # noqa: F401 (fixture)

pytestmark = pytest.mark.vboard

CPU = "/sys/devices/system/cpu"
EM = "/sys/kernel/debug/energy_model"
#: Slack allowed outside the bracket of the two estimates, as a fraction of the metered total.
TOLERANCE = 0.002


def _dt_power_uw(src: Path) -> dict[int, dict[int, int]]:
    """Per CPU0 / CPU4 cluster of RK3399: {kHz: uW} as dev_pm_opp_calc_power() computes it."""
    dts = src / "arch/arm64/boot/dts/rockchip"
    base = (dts / "rk3399-base.dtsi").read_text()
    opp = (dts / "rk3399.dtsi").read_text()
    out = {}
    for cpu_label, table, key in (("cpu_l0", "cluster0_opp", 0), ("cpu_b0", "cluster1_opp", 2)):
        node = base[base.index(f"{cpu_label}: cpu@"):]
        coef = int(re.search(r"dynamic-power-coefficient = <(\d+)>", node).group(1))
        body = opp[opp.index(f"{table}:"):]
        body = body[:body.index("\n\t};")]
        hz = [int(v) for v in re.findall(r"opp-hz = /bits/ 64 <(\d+)>", body)]
        mv = [int(v) // 1000 for v in re.findall(r"opp-microvolt = <(\d+)", body)]
        out[key] = {h // 1000: coef * m * m * (h // 1000000) // 1000000 for h, m in zip(hz, mv)}
    return out


@pytest.fixture(scope="module")
def board_run(init_binary, tmp_path_factory):  # noqa: F811
    art = build_variant(KERNELS / "iowait-boost/baseline.yml", log=print)
    tmp = tmp_path_factory.mktemp("energy")
    (tmp / "root").mkdir()
    (tmp / "root/trace").write_text("power/cpu_frequency\npower/cpu_idle\n")
    knobs = []
    for policy in ("policy0", "policy2"):  # a cpu_frequency event per policy before the window
        knobs += [f"{CPU}/cpufreq/{policy}/scaling_governor {g}" for g in ("powersave", "performance", "schedutil")]
    sysfs = boot(art, init_binary, tmp, ("table=rk3399", "opps=rk3399-little,rk3399-big"), art.cmdline,
                 [f"{EM}/cpu*/cpus", f"{EM}/cpu*/ps:*/frequency", f"{EM}/cpu*/ps:*/power",
                  f"{CPU}/cpu*/cpuidle/state*/name", EMU_IDLE_POWER,
                  "/sys/class/hwmon/hwmon*/name", "/sys/class/hwmon/hwmon*/energy*_label"],
                 knobs=knobs)
    console = sysfs["CONSOLE"]
    trace = tmp / "trace.txt"
    trace.write_text(console[console.index("TRACE_BEGIN\n") + 12:console.index("TRACE_END")])
    src = next(art.directory.parents[1].glob("trees/*/src"))
    return sysfs, trace, src


def _meter(sysfs) -> dict[str, tuple[int, int]]:
    """{label: (START uJ, END uJ)}."""
    console = sysfs["CONSOLE"]
    reads = {(m[1], m[2]): int(m[3]) for m in re.finditer(r"^METER (START|END) (\S+) (\d+)$", console, re.M)}
    out = {}
    for (when, path), value in reads.items():
        label = sysfs[path.replace("_input", "_label")]
        out.setdefault(label, [0, 0])[when == "END"] = value
    return {k: tuple(v) for k, v in out.items()}


def test_guest_shows_the_device_tree_energy_model(board_run):
    sysfs, _, src = board_run
    want = _dt_power_uw(src)
    assert sysfs[f"{EM}/cpu0/cpus"] == "0-1" and sysfs[f"{EM}/cpu2/cpus"] == "2-3"
    for pd, table in want.items():
        got = {int(sysfs[f"{EM}/cpu{pd}/ps:{khz}/frequency"]): int(sysfs[f"{EM}/cpu{pd}/ps:{khz}/power"])
               for khz in table}
        assert got == table
    assert max(want[2].values()) > 4 * max(want[0].values())  # A72 vs A53


def test_hwmon_counters_increase(board_run):
    sysfs, _, _ = board_run
    assert [v for k, v in sysfs.items() if k.endswith("/name") and "/hwmon/" in k] == ["lisa_emu_energy"]
    meter = _meter(sysfs)
    assert set(meter) == {"pd0", "pd2"}
    for label, (start, end) in meter.items():
        assert end > start > 0, label


def test_trace_estimate_agrees_with_the_meter(board_run):
    sysfs, trace_path, _ = board_run
    text = trace_path.read_text()
    marks = {m[2]: float(m[1]) for m in re.finditer(r"(\d+\.\d+): tracing_mark_write: METER_(\w+)", text)}
    dump = "\n".join(f"{k}={v}" for k, v in sysfs.items() if k.startswith((EM, CPU)))
    idle = sysfs[EMU_IDLE_POWER].split()
    dump += "\n" + "\n".join(f"idle_mw={' '.join(idle[i:i + 3])}" for i in range(0, len(idle), 3))
    model = parse_target_dump(dump, "vboard")
    assert set(model.clusters) == {"pd0", "pd2"}
    assert model.clusters["pd0"].idle_mw == {0: 4.0, 1: 0.0, 2: 0.0}
    ana = load_trace(str(trace_path)).ana.energy
    # Each set of counter reads lies between two markers: the meter's window
    # contains (START_1, END_0) and is contained in (START_0, END_1).
    inner = ana.summary(model=model, window=(marks["START_1"], marks["END_0"]))["clusters"]
    outer = ana.summary(model=model, window=(marks["START_0"], marks["END_1"]))["clusters"]
    meter = _meter(sysfs)
    total = sum(end - start for start, end in meter.values()) / 1000
    print(f"window {marks['END_0'] - marks['START_1']:.3f} s, metered {total:.3f} mJ")
    for pd, (start, end) in meter.items():
        metered_mj = (end - start) / 1000
        mid = (inner[pd] + outer[pd]) / 2
        print(f"{pd}: meter {metered_mj:.4f} mJ, trace {inner[pd]:.4f}..{outer[pd]:.4f} mJ, "
              f"meter - middle {metered_mj - mid:+.4f} mJ ({100 * (metered_mj - mid) / total:+.3f} % of the total)")
        slack = TOLERANCE * total
        assert inner[pd] - slack <= metered_mj <= outer[pd] + slack, pd
    assert total > 10.0  # the busy burst ran at a high OPP
