"""Errors that used to be tracebacks: each is one line on stderr through the real command line,
exit status 2 (130 for SIGINT, 1 for a study's own notebook failing), and nothing collected lost.

Every test runs ``lisa-ext`` in a subprocess, as a user does: an unreachable SSH board, a missing
key file, SIGINT in the middle of a live campaign (knob restored, finished run kept, the exact
resume command), ``--out`` on a file, a directory given as a spec, a notebook cell raising, a spec
value of the wrong type, and ``study new`` with knob values YAML would read as numbers or booleans.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from ruamel.yaml import YAML

from campaign_helpers import LOCAL_TARGET, read_knob, require_live, write_spec

REPO = Path(__file__).resolve().parents[1]
LISA_EXT = str(Path(sys.executable).with_name("lisa-ext"))
SAMPLE = REPO / "data" / "samples" / "wq-affinity-board"
#: a real, harmless knob (the time slice of SCHED_RR tasks, none of which run here) that no other
#: test varies: live tests of other files may run at the same time
RR_KNOB = "/proc/sys/kernel/sched_rr_timeslice_ms"

_RTAPP = """\
  - name: rt
    kind: rtapp
    duration-s: 0.5
    tasks: {busy: {duty-cycle-pct: 20, period-ms: 10}}
"""


def _lisa_ext(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([LISA_EXT, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def _one_line(proc: subprocess.CompletedProcess) -> str:
    """stderr, which must be exactly one line (no traceback)."""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _spec(path: Path, target: Path | str, name: str = "trust") -> Path:
    path.write_text(f"name: {name}\ntarget: {target}\niterations: 1\nvariants:\n  - name: base\n"
                    f"workloads:\n{_RTAPP}")
    return path


# -- an SSH board that cannot be reached ---------------------------------------------------------

def _board_config(tmp_path: Path, port: int, keyfile: Path) -> Path:
    """The shipped SSH board example, filled in: this host's loopback, ``port``, ``keyfile``."""
    yaml = YAML()
    conf = yaml.load(REPO / "target-configs" / "ssh-board.example.yml")
    conf["target-conf"].update(host="127.0.0.1", port=port, keyfile=str(keyfile))
    path = tmp_path / "my-board.yml"
    yaml.dump(conf, path)
    return path


@pytest.mark.parametrize("key_exists", [True, False], ids=["closed-port", "missing-key-file"])
def test_an_unreachable_ssh_board_is_one_line_naming_its_config(tmp_path, key_exists):
    port = _closed_port()
    keyfile = tmp_path / "id_ed25519"
    if key_exists:
        keyfile.write_text("not reached: nothing listens on the port\n")
    config = _board_config(tmp_path, port, keyfile)
    spec = _spec(tmp_path / "spec.yml", config)
    proc = _lisa_ext("campaign", "run", str(spec), "--out", str(tmp_path / "data"), "--no-progress", cwd=tmp_path,
                     env={"LISA_EXT_KNOWN_HOSTS": str(tmp_path / "known_hosts")})
    assert proc.returncode == 2, proc.stderr
    line = _one_line(proc)
    assert line.startswith("lisa-ext campaign: error: ") and str(config) in line and f"127.0.0.1:{port}" in line
    assert ("cannot connect over SSH" if key_exists else f"the key file {keyfile} (keyfile) does not exist") in line
    assert not (tmp_path / "data" / "runs").exists()


# -- SIGINT during a live campaign ---------------------------------------------------------------

def test_sigint_restores_the_knob_keeps_finished_runs_and_says_how_to_resume(tmp_path):
    require_live()
    original = read_knob(RR_KNOB)
    changed = "37" if original != "37" else "41"
    spec = write_spec(tmp_path / "spec.yml", f"""\
name: trust-sigint
target: @TARGET@
iterations: 1
trace:
  events: [sched:sched_switch]
variants:
  - name: base
    knobs: {{{RR_KNOB}: "{original}"}}
  - name: other
    knobs: {{{RR_KNOB}: "{changed}"}}
workloads:
  - name: io
    kind: fio
    options: {{rw: randread, bs: 4k, ioengine: psync, direct: 1, size: 16M, runtime: 4, time_based: 1}}
""")
    out = tmp_path / "data"
    runner = subprocess.Popen([LISA_EXT, "campaign", "run", str(spec), "--out", str(out), "--no-progress"],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        # SIGINT once the second run has written its knob and started trace-cmd and fio
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                journal = json.loads((out / ".runner-journal.json").read_text())
            except (FileNotFoundError, ValueError):
                journal = {}
            if journal.get("run") == "other/io/0" and len(journal.get("processes", [])) >= 2:
                break
            assert runner.poll() is None, runner.communicate()
            time.sleep(0.05)
        else:
            pytest.fail("the runner never reached other/io/0")
        time.sleep(0.5)
        assert read_knob(RR_KNOB) == changed
        runner.send_signal(signal.SIGINT)
        _stdout, stderr = runner.communicate(timeout=120)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        if read_knob(RR_KNOB) != original:
            Path(RR_KNOB).write_text(original)
            pytest.fail(f"{RR_KNOB} was left at {read_knob(RR_KNOB)!r}, not restored to {original!r}")
    assert runner.returncode == 130, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("lisa-ext campaign: interrupted: ")
    assert f"restored {RR_KNOB}={original}" in lines[0] and "discarded the partial run other/io/0" in lines[0]
    assert lines[0].endswith(f"; resume with lisa-ext campaign run {spec} --out {out} --resume")
    assert json.loads((out / "runs/base/io/0/result.json").read_text())["status"] == "ok"
    assert not (out / "runs/other/io/0").exists() and not list(out.glob("runs/*/*/.tmp-*"))
    assert not (out / ".runner-journal.json").exists()
    assert not [i for i in os.listdir("/sys/kernel/tracing/instances") if str(runner.pid) in i]


# -- paths that are not what a command expects ---------------------------------------------------

def test_out_naming_a_file_is_one_line_and_the_file_is_kept(tmp_path):
    spec = _spec(tmp_path / "spec.yml", LOCAL_TARGET)
    taken = tmp_path / "results.txt"
    taken.write_text("the user's own file\n")
    for out in (taken, taken / "campaign"):
        proc = _lisa_ext("campaign", "run", str(spec), "--out", str(out), "--no-progress", cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        line = _one_line(proc)
        assert line.startswith(f"lisa-ext campaign: error: --out {out}: ") and "expected a campaign directory" in line
    assert taken.read_text() == "the user's own file\n"


def test_a_directory_given_as_a_spec_says_it_is_a_directory(tmp_path):
    proc = _lisa_ext("campaign", "check", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = _one_line(proc)
    assert "a directory; expected a campaign spec file" in line and "not found" not in line


@pytest.mark.parametrize("value, named", [("1.5", "number"), ("[1]", "list"), ("{a: 1}", "mapping"),
                                          ("&yes true", "boolean")])
def test_a_value_of_the_wrong_type_is_named_in_words(tmp_path, value, named):
    spec = tmp_path / "spec.yml"
    spec.write_text(f"name: trust\ntarget: {LOCAL_TARGET}\niterations: {value}\nvariants:\n  - name: base\n"
                    f"workloads:\n{_RTAPP}")
    proc = _lisa_ext("campaign", "check", str(spec), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = _one_line(proc)
    assert f"iterations (line 3): expected integer" in line and f"got {named} " in line
    assert not any(word in line for word in ("Scalar", "Commented", "ordereddict"))


# -- studies --------------------------------------------------------------------------------------

def test_a_failing_notebook_cell_is_one_line_and_the_partial_notebook_is_kept(tmp_path):
    (tmp_path / "notebooks").mkdir()
    _spec(tmp_path / "notebooks" / "boom.yml", "../target-configs/local.yml", name="boom")
    shutil.copytree(REPO / "target-configs", tmp_path / "target-configs")
    shutil.copytree(SAMPLE, tmp_path / "data" / "boom")
    parameters = nbformat.v4.new_code_cell('campaign_dir = "data/boom"\nreport_dir = "out/boom-report"\n'
                                           "smoke = False")
    parameters.metadata["tags"] = ["parameters"]
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# boom"), parameters, nbformat.v4.new_code_cell("ran = 'cell 3'"),
        # the kernel's own stderr (ipykernel logs there, e.g. "KeyboardInterrupt caught in kernel"
        # when it is interrupted at shutdown) goes to a log beside the notebook, not the user's terminal
        nbformat.v4.new_code_cell("import os\nos.write(2, b'noise from the kernel\\n')\n"
                                  "raise ValueError('the study\\nbroke')"),
        nbformat.v4.new_code_cell("never = 1")])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, tmp_path / "notebooks" / "boom.ipynb")
    proc = _lisa_ext("study", "run", "boom", "--no-run", "--data", "data/boom", cwd=tmp_path,
                     env={"LISA_EXT_WORKBENCH": str(tmp_path)}, timeout=900)
    assert proc.returncode == 1, proc.stderr
    executed = tmp_path / "out" / "boom.ipynb"
    assert _one_line(proc) == (f"lisa-ext study: error: {tmp_path / 'notebooks' / 'boom.ipynb'}: cell 4: "
                               f"ValueError: the study broke; the notebook as far as it ran: {executed}")
    cells = nbformat.read(executed, as_version=4).cells
    assert any("'cell 3'" in c.source and c.get("execution_count") for c in cells)
    assert (tmp_path / "data" / "boom" / "report").is_dir()  # what the study wrote before is kept
    assert "noise from the kernel" in executed.with_suffix(".kernel.log").read_text()


@pytest.fixture
def workbench(tmp_path):
    """The workbench's inputs, as a user's checkout has them (``study new`` writes into notebooks/)."""
    for name in ("notebooks", "kernels", "target-configs"):
        shutil.copytree(REPO / name, tmp_path / name)
    return tmp_path


@pytest.mark.parametrize("values, variants, knob_values", [
    # a number is named after the knob's file: "0" would explain nothing on a page
    ("0,1", ["sched-rr-timeslice-ms-0", "sched-rr-timeslice-ms-1"], ["0", "1"]),
    ("100,4", ["sched-rr-timeslice-ms-100", "sched-rr-timeslice-ms-4"], ["100", "4"]),
    ("a b,c", ["a-b", "c"], ["a b", "c"]),
    ("true,false", ["true", "false"], ["true", "false"]),
])
def test_study_new_writes_a_spec_that_passes_campaign_check(workbench, values, variants, knob_values):
    knob = RR_KNOB
    env = {"LISA_EXT_WORKBENCH": str(workbench)}
    proc = _lisa_ext("study", "new", "x", "--knob", knob, "--values", values, "--no-render", cwd=workbench, env=env)
    assert proc.returncode == 0, proc.stderr
    spec = workbench / "notebooks" / "x.yml"
    check = _lisa_ext("campaign", "check", str(spec), cwd=workbench, env=env)
    assert check.returncode == 0, check.stderr
    assert [f"  variant {v}: the target's kernel, 1 knob(s)" for v in variants] == \
        [line for line in check.stdout.splitlines() if line.startswith("  variant ")]
    written = YAML(typ="safe").load(spec)
    assert [(v["name"], v["knobs"]) for v in written["variants"]] == \
        [(name, {knob: value}) for name, value in zip(variants, knob_values)]


def test_study_new_refused_writes_nothing_and_names_no_file_it_deleted(workbench):
    proc = _lisa_ext("study", "new", "x", "--knob", "/etc/passwd", "--values", "a,b", "--no-render",
                     cwd=workbench, env={"LISA_EXT_WORKBENCH": str(workbench)})
    assert proc.returncode == 2, proc.stderr
    line = _one_line(proc)
    assert line.startswith("lisa-ext study: error: study 'x' not written: ") and "knob '/etc/passwd'" in line
    assert str(workbench / "notebooks" / "x.yml") not in line
    assert not list((workbench / "notebooks").glob("x.*"))
