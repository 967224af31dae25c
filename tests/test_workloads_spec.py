"""Workload options in a campaign spec: every mistake is a SpecError naming the key and what is allowed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from campaign_helpers import REPO, write_spec
from lisa_ext.campaign.spec import load_spec
from lisa_ext.campaign.tools import build_tool, missing_tool_hint
from lisa_ext.campaign.workloads import WORKLOAD_KINDS, make_workload
from lisa_ext.errors import SpecError, UserError


def _load(tmp_path: Path, workload: str):
    spec = write_spec(tmp_path / "spec.yml", f"""\
name: wl
target: @TARGET@
iterations: 1
variants:
  - name: base
workloads:
  - name: w
{workload}""")
    return load_spec(spec)


def test_every_kind_is_registered():
    assert {"schbench", "ebizzy", "pgbench", "hackbench", "cyclictest", "fio", "rtapp", "wa"} <= set(WORKLOAD_KINDS)


@pytest.mark.parametrize("workload, key, message", [
    ("    kind: schbench\n    runtime: 5\n", "workloads[0].runtime", "unknown key; allowed here: name, kind, runtime-s"),
    ("    kind: schbench\n    message-threads: 2\n", "workloads[0].runtime-s", "missing required key"),
    ("    kind: schbench\n    runtime-s: 0\n", "workloads[0].runtime-s", "expected an integer from 1 to 86400"),
    ("    kind: ebizzy\n    duration-s: 5\n    target-util-pct: 20\n    sleep-after-records: 100\n",
     "workloads[0].sleep-after-records", "not allowed with target-util-pct"),
    ("    kind: ebizzy\n    duration-s: 5\n    sleep-us: 0\n", "workloads[0].sleep-us", "expected an integer from 1 to 60000000"),
    ("    kind: ebizzy\n    duration-s: 5\n    target-util-pct: 100\n", "workloads[0].target-util-pct",
     "expected a number from 0.1 to 99.9"),
    ("    kind: pgbench\n    duration-s: 5\n    server-settings: {port: 5433}\n", "workloads[0].server-settings",
     "set by lisa-ext itself"),
    ("    kind: pgbench\n    duration-s: 5\n    clients: two\n", "workloads[0].clients", "expected integer"),
    ("    kind: pgbench\n    duration-s: 5\n    transactions: 20\n", "workloads[0].duration-s",
     "expected exactly one of duration-s (-T) and transactions (-t)"),
    ("    kind: pgbench\n    clients: 4\n", "workloads[0].duration-s", "neither is set"),
    ("    kind: cyclictest\n    duration-s: 5\n    priority: 120\n", "workloads[0].priority", "expected an integer from 1 to 99"),
    ("    kind: hackbench\n    mode: fibre\n", "workloads[0].mode", "must be process or thread"),
    ("    kind: fio\n    options: {rw: read}\n    dm-crypt: {backing: loop, flags: [fast]}\n",
     "workloads[0].dm-crypt.flags", "allowed: same_cpu_crypt"),
    ("    kind: fio\n    options: {rw: read}\n    dm-crypt: {size-mb: 64}\n",
     "workloads[0].dm-crypt.backing", "missing required key"),
    ("    kind: fio\n    options: {rw: read, filename: /tmp/x}\n    dm-crypt: {backing: loop}\n",
     "workloads[0].options.filename", "not allowed with dm-crypt"),
    ("    kind: rtapp\n    duration-s: 1\n    tasks: {t: {duty-cycle-pct: 5, period-ms: 2, policy: SCHED_RR, priority: 0}}\n",
     "workloads[0].tasks.t.priority", "must be in 1..99 for SCHED_RR"),
    ("    kind: rtapp\n    duration-s: 1\n    tasks: {t: {duty-cycle-pct: 5, period-ms: 2, priority: 20}}\n",
     "workloads[0].tasks.t.priority", "must be in -20..19 for SCHED_OTHER"),
    ("    kind: rtapp\n    duration-s: 1\n    tasks: {t: {duty-cycle-pct: 5, period-ms: 2, policy: RR}}\n",
     "workloads[0].tasks.t.policy", "'RR' is not one of: SCHED_OTHER"),
    ("    kind: rtapp\n    duration-s: 1\n    tasks: {t: {duty-cycle-pct: 5, period-ms: 2, cpus: [one]}}\n",
     "workloads[0].tasks.t.cpus", "must be a list of CPU numbers"),
])
def test_bad_workload_options(tmp_path, workload, key, message):
    with pytest.raises(SpecError) as err:
        _load(tmp_path, workload)
    assert err.value.key.startswith(key)
    assert message in err.value.problem
    assert str(tmp_path / "spec.yml") in str(err.value)


def test_commands_built_from_options(tmp_path):
    spec = _load(tmp_path, "    kind: schbench\n    runtime-s: 30\n    message-threads: 2\n    threads: 1\n")
    assert make_workload(spec.workloads[0]).command() == "schbench -r 30 -m 2 -t 1 -j schbench.json"
    spec = _load(tmp_path, "    kind: pgbench\n    duration-s: 30\n    select-only: true\n    no-vacuum: true\n"
                           "    rate: 10\n    clients: 44\n")
    assert make_workload(spec.workloads[0]).pgbench_args() == "-T 30 -c 44 -j 1 -S -n -R 10"
    spec = _load(tmp_path, "    kind: pgbench\n    transactions: 20\n    clients: 4\n    threads: 4\n")
    assert make_workload(spec.workloads[0]).pgbench_args() == "-t 20 -c 4 -j 4"
    spec = _load(tmp_path, "    kind: ebizzy\n    duration-s: 10\n    cpu: 1\n    sleep-after-records: 50\n"
                           "    sleep-us: 1000\n")
    assert make_workload(spec.workloads[0]).command({}) == "taskset -c 1 ebizzy -t 1 -S 10 -a 50 -i 1000"
    spec = _load(tmp_path, "    kind: ebizzy\n    duration-s: 10\n    cpu: 3\n    target-util-pct: 20\n"
                           "    sleep-us: 100000\n    chunk-size: 65536\n")
    state = {"ebizzy_calibration:20:cpu3:sleep100000us:chunk65536": {"sleep_after": 7, "sleep_us": 100000}}
    assert make_workload(spec.workloads[0]).command(state) == \
        "taskset -c 3 ebizzy -t 1 -S 10 -s 65536 -a 7 -i 100000"
    spec = _load(tmp_path, "    kind: fio\n    options: {rw: randrw}\n    dm-crypt: {backing: loop}\n")
    assert set(make_workload(spec.workloads[0]).TOOLS) >= {"fio", "dmsetup", "losetup"}


def test_missing_tool_hints(tmp_path, monkeypatch):
    # the command to paste: the sources shipped beside the workbench, the spec's own target
    conf = tmp_path / "my board.yml"
    monkeypatch.chdir(tmp_path)
    hint = missing_tool_hint("schbench", conf)
    command = re.search(r"lisa-ext campaign tool install schbench --src (.+) --target 'my board.yml'$", hint)
    assert command, hint
    shared = REPO.parent / "shared" / "src" / "schbench"
    if (shared / "schbench.c").is_file():
        assert (tmp_path / command[1]).resolve() == shared.resolve()
    else:
        assert command[1] == "<a checkout of github masoncl/schbench>"
    assert "install-system-packages.sh" in missing_tool_hint("pgbench", conf)


def test_build_refuses_a_wrong_source_tree(tmp_path):
    with pytest.raises(UserError, match="not a schbench source tree"):
        build_tool("schbench", tmp_path)
    with pytest.raises(UserError, match="lisa-ext builds schbench, ebizzy"):
        build_tool("geekbench", tmp_path)


def test_two_processes_building_the_same_tool_both_get_it(tmp_path):
    """`make test` runs the board tests beside the host tests: both may build ebizzy at once."""
    from workload_tools import SOURCES, require_sources

    require_sources()
    code = ("import sys; from lisa_ext.campaign.tools import build_tool; "
            "print(build_tool('ebizzy', sys.argv[1]))")
    env = {**os.environ, "LISA_EXT_CACHE": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(SOURCES["ebizzy"])], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outs]
    paths = {out.strip() for out, _ in outs}
    assert len(paths) == 1 and Path(paths.pop()).is_file()
    assert [d.name for d in (tmp_path / "tools").iterdir() if d.name.endswith(".part")] == []


def test_cached_builds_are_installed_where_missing(tmp_path, monkeypatch):
    from campaign_helpers import LOCAL_TARGET
    from lisa_ext.campaign import tools
    from lisa_ext.target import connect

    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path))
    build = tmp_path / "tools" / "ebizzy-0123456789abcdef"
    build.mkdir(parents=True)
    (build / "ebizzy").write_text("#!/bin/sh\necho cached ebizzy\n")
    (build / "ebizzy").chmod(0o755)
    assert tools.cached_build("ebizzy") == build / "ebizzy"
    assert tools.cached_build("schbench") is None
    target = connect(LOCAL_TARGET)  # this machine, through devlib, as campaigns use it
    earlier = target.which("ebizzy")
    aside = None
    if earlier is not None:
        # a tool an earlier campaign installed into the target's own directory: set aside meanwhile
        if not earlier.startswith(target.executables_directory.rstrip("/") + "/"):
            pytest.skip(f"external: ebizzy is installed on this machine outside the target's directory ({earlier})")
        aside = f"{earlier}.aside"
        target.execute(f"mv {earlier} {aside}")
    try:
        assert tools.install_cached_tools(target, ["ebizzy", "schbench", "fio"]) == ["ebizzy"]
        assert target.execute("ebizzy").strip() == "cached ebizzy"
        assert tools.install_cached_tools(target, ["ebizzy"]) == []  # present now
    finally:
        if target.which("ebizzy"):
            target.remove(target.which("ebizzy"))
        if aside is not None:
            target.execute(f"mv {aside} {earlier}")
