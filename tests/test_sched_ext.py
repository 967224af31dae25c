"""BPF schedulers as variants, on the host: the sched-ext kernel variant, the spec's sched-ext key,
the kernel's disable reason, the clang the scheduler build needs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from campaign_helpers import LISA_EXT, REPO, write_spec
from lisa_ext.campaign.sched_ext import disable_reason
from lisa_ext.campaign.spec import load_spec
from lisa_ext.errors import SpecError
from lisa_ext.kernel.build import artefact_hash
from lisa_ext.kernel.spec import load_variant_spec

SCX_KERNEL = REPO / "kernels" / "scx" / "eevdf.yml"
PLAIN_KERNEL = REPO / "kernels" / "iowait-boost" / "baseline.yml"

SPEC = f"""\
name: scx
target: @TARGET@
iterations: 1
variants:
  - name: eevdf
    kernel: {SCX_KERNEL}
  - name: simple
    kernel: {SCX_KERNEL}
    sched-ext: {{scheduler: scx_simple, args: [-f]}}
workloads:
  - name: rt
    kind: rtapp
    duration-s: 1
    tasks: {{small: {{duty-cycle-pct: 10, period-ms: 16}}}}
"""


def spec_error(tmp_path: Path, body: str) -> str:
    path = write_spec(tmp_path / "spec.yml", body)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    msg = str(info.value)
    assert msg.startswith(str(path)) and "\n" not in msg, msg
    return msg


def test_only_the_sched_ext_variant_takes_the_bpf_fragment():
    scx, plain = load_variant_spec(SCX_KERNEL), load_variant_spec(PLAIN_KERNEL)
    fragment = REPO / "kernels" / "configs" / "sched-ext.config"
    assert fragment in scx.configs and fragment not in plain.configs
    text = fragment.read_text()
    for option in ("CONFIG_BPF_SYSCALL=y", "CONFIG_BPF_JIT=y", "CONFIG_DEBUG_INFO_BTF=y", "CONFIG_SCHED_CLASS_EXT=y"):
        assert f"\n{option}\n" in text
    # the plain variant's build (and its cache entry) does not depend on the new fragment
    assert artefact_hash(plain, "tree") != artefact_hash(scx, "tree")
    assert all("sched-ext" not in c.name for p in (REPO / "kernels").glob("*/*.yml") if p.parent.name != "scx"
               for c in load_variant_spec(p).configs)


def test_a_scheduler_variant_loads(tmp_path):
    spec = load_spec(write_spec(tmp_path / "spec.yml", SPEC))
    eevdf, simple = spec.variants
    assert eevdf.sched_ext is None
    scx = simple.sched_ext
    assert (scx.scheduler, scx.args, scx.ops) == ("scx_simple", ("-f",), "simple")


@pytest.mark.parametrize("old,new,expected", [
    ("scheduler: scx_simple", "scheduler: scx_rusty",
     "variants[1].sched-ext.scheduler (line 9): unknown scheduler 'scx_rusty'; lisa-ext builds: scx_simple, scx_qmap"),
    ("args: [-f]", "args: ['-f x']", "variants[1].sched-ext.args (line 9): '-f x' holds whitespace"),
    ("args: [-f]", "args: -f", "variants[1].sched-ext.args (line 9): expected list"),
    ("args: [-f]", "bogus: 1", "variants[1].sched-ext.bogus (line 9): unknown key; allowed here: scheduler, args"),
    ("{scheduler: scx_simple, args: [-f]}", "{args: [-f]}", "variants[1].sched-ext.scheduler: missing required key"),
])
def test_bad_scheduler_settings_are_one_line(tmp_path, old, new, expected):
    assert expected in spec_error(tmp_path, SPEC.replace(old, new))


def test_a_kernel_without_sched_ext_names_the_variant_and_what_is_missing(tmp_path):
    msg = spec_error(tmp_path, SPEC.replace(f"    kernel: {SCX_KERNEL}\n    sched-ext",
                                            f"    kernel: {PLAIN_KERNEL}\n    sched-ext"))
    assert "variants[1].sched-ext" in msg and str(PLAIN_KERNEL) in msg and "CONFIG_SCHED_CLASS_EXT=y" in msg


def test_campaign_check_stops_on_a_kernel_without_sched_ext(tmp_path):
    path = write_spec(tmp_path / "spec.yml", SPEC.replace(f"    kernel: {SCX_KERNEL}\n    sched-ext",
                                                          f"    kernel: {PLAIN_KERNEL}\n    sched-ext"))
    proc = subprocess.run(LISA_EXT + ["campaign", "check", str(path)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "CONFIG_SCHED_CLASS_EXT" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


KERNEL_LOG = """\
[   10.000000] sched_ext: BPF scheduler "simple" enabled
[   12.000000] sched_ext: BPF scheduler "simple" disabled (unregistered from user space)
[   20.000000] sched_ext: BPF scheduler "simple" enabled
[   25.000000] sched_ext: BPF scheduler "simple" disabled (runnable task stall)
[   25.000001] sched_ext: simple: kworker/0:1[12] failed to run for 30.2s
[   26.000000] sched_ext: BPF scheduler "qmap" enabled
"""


def test_the_kernel_reason_is_the_last_runs_own():
    assert disable_reason(KERNEL_LOG, "simple") == "runnable task stall: kworker/0:1[12] failed to run for 30.2s"
    # qmap was enabled and not disabled since: no reason yet, not simple's
    assert disable_reason(KERNEL_LOG, "qmap") is None
    assert disable_reason(KERNEL_LOG.splitlines()[0] + "\n" + KERNEL_LOG.splitlines()[1], "simple") == \
        "unregistered from user space"


def test_building_a_scheduler_without_clang_is_one_line(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    code = "from lisa_ext.campaign.tools import find_bpf_clang; find_bpf_clang()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PATH=str(empty)))
    assert proc.returncode != 0
    assert "needs clang >= 16" in proc.stderr and "clang-19" in proc.stderr
