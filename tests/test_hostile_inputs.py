"""Hostile specs and configs: a colleague's file is read within bounds, and none of its values
becomes an option or shell text on this machine or the target.

Every bad input meets the real ``lisa-ext`` command a user would run (``campaign run``,
``kernel check`` / ``kernel build``, ``vboard up --variant``) and must end in exactly one line
naming the file, the key (or line, or byte offset) and what was expected, exit status 2, and
nothing run: the campaign directory is not created, and no marker file a payload would create
appears. Git bases are real local repositories; the payloads are real ``--upload-pack`` and
``ProxyCommand`` strings that run ``touch MARKER`` if they ever reach git or ssh as an option.
"""

from __future__ import annotations

import re
import subprocess
import threading
from pathlib import Path

import pytest

from campaign_helpers import LISA_EXT, LOCAL_TARGET, REPO, require_live
from lisa_ext.campaign.requirements import REQUIREMENTS_SCHEMA
from lisa_ext.campaign.spec import _SMOKE_SCHEMA, _TOP_SCHEMA, _TRACE_SCHEMA, MAX_ITERATIONS, MAX_RUNS
from lisa_ext.campaign.workloads import WORKLOAD_KINDS
from lisa_ext.campaign.workloads.dmcrypt import CRYPT_SCHEMA
from lisa_ext.campaign.workloads.rtapp import _PHASE_SCHEMA, _TASK_SCHEMA
from lisa_ext.cli import main
from lisa_ext.errors import UserError
from lisa_ext.kernel.spec import BaseTree
from lisa_ext.schema import MAX_NUMBER_DIGITS, MAX_YAML_BYTES, MAX_YAML_DEPTH, MAX_YAML_VALUES
from lisa_ext.target.config import _EXTRA_SCHEMA

SPEC = """\
name: t
target: {target}
iterations: 1
variants:
  - name: a
workloads:
  - name: w
    kind: hackbench
    groups: 1
    loops: 10
"""

FIO_SPEC = SPEC.replace("""    kind: hackbench
    groups: 1
    loops: 10
""", """    kind: fio
    options: {{rw: read, size: 1M, runtime: 1}}
""")


def _cli(capsys, *argv: str) -> str:
    """Run ``lisa-ext ARGV`` as a user would; return its one error line (exit status 2)."""
    status = main(list(argv))
    err = capsys.readouterr().err
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _campaign_refused(capsys, tmp_path: Path, spec: Path, key: str, *words: str, file: Path | None = None) -> str:
    """``campaign run SPEC`` stops with one line naming ``file`` (default: the spec) and ``key``."""
    out = tmp_path / "campaign-dir"
    line = _cli(capsys, "campaign", "run", str(spec), "-o", str(out), "--no-progress")
    assert line.startswith(f"lisa-ext campaign: error: {file or spec}: {key}"), line
    for word in words:
        assert word in line, line
    assert not out.exists()  # nothing ran, nothing was written
    return line


def _write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def _spec(tmp_path: Path, text: str | None = None, **replace: str) -> Path:
    text = text if text is not None else SPEC.format(target=LOCAL_TARGET)
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    return _write(tmp_path / "spec.yml", text)


# -- bounded YAML --------------------------------------------------------------------------

def _laughs(levels: int) -> str:
    """A "billion laughs" document: 10**levels values once its aliases are expanded, in the
    options of a fio workload (the mapping the spec reader used to expand)."""
    anchors = "".join(f"      l{i}: &l{i} [" + ", ".join([f"*l{i - 1}" if i else "lol"] * 10) + "]\n"
                      for i in range(levels))
    return SPEC.format(target=LOCAL_TARGET).replace(
        "    kind: hackbench\n    groups: 1\n    loops: 10\n", f"    kind: fio\n    options:\n{anchors}")


@pytest.mark.parametrize("name, text, key, words", [
    ("flow nesting", "name: t\ndescription: " + "[" * 20_000 + "]" * 20_000 + "\n", "line 2",
     (f"nested more than {MAX_YAML_DEPTH} deep",)),
    ("block nesting", "".join("  " * i + "- \n" for i in range(200)), f"line {MAX_YAML_DEPTH + 1}",
     (f"nested more than {MAX_YAML_DEPTH} deep",)),
    ("compact nesting", "- " * 20_000 + "x\n", "line 1", (f"nested more than {MAX_YAML_DEPTH} deep",)),
    ("billion laughs", _laughs(10), "line 13", (f"more than {MAX_YAML_VALUES} values", "alias *l2")),
    ("recursive alias", "name: &n [t, *n]\n", "line 1", ("alias *n refers to the node holding it",)),
    ("undefined alias", "name: *n\n", "line 1", ("alias *n refers to no anchor",)),
    ("huge number", f"name: t\niterations: {'9' * 5000}\n", "line 2",
     (f"a number of 5000 digits; no key takes more than {MAX_NUMBER_DIGITS}",)),
    ("too large", "name: t\ndescription: " + "x" * MAX_YAML_BYTES + "\n", "campaign spec",
     (f"larger than {MAX_YAML_BYTES} bytes",)),
    ("not UTF-8", b"name: t\ndescription: caf\xe9\n", "byte 24 (line 2)", ("not UTF-8 text (byte 0xe9)",)),
    ("not YAML", "name: [t\n", "line 2", ("not valid YAML",)),
])
def test_unbounded_yaml_is_one_line_and_exit_2(capsys, tmp_path, name, text, key, words):
    _campaign_refused(capsys, tmp_path, _write(tmp_path / "spec.yml", text), key, *words)


def test_billion_laughs_is_refused_while_read_not_expanded(tmp_path):
    """10**10 values: expanding them would take hours and terabytes; the real command refuses
    in well under the timeout (a guard against a hang, not a speed target)."""
    spec = _write(tmp_path / "spec.yml", _laughs(10))
    proc = subprocess.run(LISA_EXT + ["campaign", "run", str(spec), "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"{spec}: line 13: more than {MAX_YAML_VALUES} values" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_python_tags_are_refused(capsys, tmp_path):
    marker = tmp_path / "PWNED"
    spec = _spec(tmp_path, **{"name: t\n": f"name: t\ndescription: !!python/object/apply:os.system "
                                           f"['touch {marker}']\n"})
    _campaign_refused(capsys, tmp_path, spec, "line 2", "tag tag:yaml.org,2002:python/object/apply:os.system "
                      "is not allowed: campaign spec files are plain YAML")
    assert not marker.exists()


@pytest.mark.parametrize("tag", ["!call:subprocess.call {{args: 'touch {marker}', shell: true}}",
                                 "!include /etc/passwd", "!env:str HOME"])
def test_lisa_tags_in_a_target_config_are_refused(capsys, tmp_path, tag):
    """LISA's own loader of a target config (used at connect) runs !call:, follows !include."""
    marker = tmp_path / "PWNED"
    target = _write(tmp_path / "host.yml", "target-conf:\n  kind: host\n  devlib:\n    platform:\n"
                    f"      args: {tag.format(marker=marker)}\n")
    spec = _spec(tmp_path, text=SPEC.format(target=target))
    _campaign_refused(capsys, tmp_path, spec, "line 5: tag !", "is not allowed: target config files are plain YAML",
                      file=target)
    assert not marker.exists()


def test_kernel_and_target_files_are_read_with_the_same_bounds(capsys, tmp_path):
    kernel = _write(tmp_path / "kernels" / "s" / "v.yml", "name: v\nconfigs: " + "[" * 5000 + "\n")
    line = _cli(capsys, "kernel", "check", str(kernel))
    assert line == (f"lisa-ext kernel: error: {kernel}: line 2: mappings and lists nested more than "
                    f"{MAX_YAML_DEPTH} deep; kernel variant spec files need a handful of levels")
    target = _write(tmp_path / "target.yml", b"target-conf:\n  kind: linux\n  host: b\xffad\n")
    spec = _spec(tmp_path, text=SPEC.format(target=target))
    _campaign_refused(capsys, tmp_path, spec, "byte 36 (line 3): not UTF-8 text", file=target)


# -- values no one should accept ------------------------------------------------------------

@pytest.mark.parametrize("old, new, key, expected", [
    ("iterations: 1", "iterations: 1000000000000000000000000000000", "iterations (line 3)",
     f"expected an integer from 1 to {MAX_ITERATIONS}"),
    ("iterations: 1", "iterations: 1\nretries: 1000000000000", "retries (line 4)",
     "expected an integer from 0 to 100"),
    ("iterations: 1", "iterations: 1\ntrace: {events: [sched:sched_switch], "
     "buffer-size-kb: 1000000000000000}", "trace.buffer-size-kb", "expected an integer from 1 to 1048576"),
    ("iterations: 1", "iterations: 1\ntrace: {events: [sched], iterations: [-1]}", "trace.iterations",
     f"iteration numbers (0 to {MAX_ITERATIONS - 1})"),
    ("loops: 10", "loops: 10\n    timeout-s: .inf", "workloads[0].timeout-s (line 11)",
     "expected a finite number"),
    ("loops: 10", "loops: 10\n    timeout-s: 1e400", "workloads[0].timeout-s (line 11)",
     "expected a finite number"),
    ("loops: 10", "loops: 10\n    timeout-s: -5", "workloads[0].timeout-s (line 11)",
     "expected a number from 1 to 604800"),
    ("loops: 10", "loops: 10\n    timeout-s: .nan", "workloads[0].timeout-s (line 11)",
     "expected a finite number"),
    ("groups: 1", "groups: true", "workloads[0].groups (line 9)", "expected integer"),
    ("groups: 1", "groups: '1'", "workloads[0].groups (line 9)", "expected integer"),
])
def test_values_out_of_range(capsys, tmp_path, old, new, key, expected):
    _campaign_refused(capsys, tmp_path, _spec(tmp_path, **{old: new}), key, expected)


def test_plan_of_runs_is_bounded(capsys, tmp_path):
    """10000 iterations are allowed, but not times 300 variants: plan_runs builds the plan in memory."""
    variants = "".join(f"  - name: v{i}\n" for i in range(300))
    spec = _spec(tmp_path, **{"iterations: 1": "iterations: 10000", "  - name: a\n": variants})
    _campaign_refused(capsys, tmp_path, spec, "iterations: 300 variants x 1 workloads x 10000 iterations is "
                      f"3000000 runs; a campaign has at most {MAX_RUNS}")


@pytest.mark.parametrize("old, new, key, expected", [
    ("  - name: a\n", f"  - name: {'a' * 65}\n", "variants[0].name (line 5)", "use 1 to 64 letters"),
    ("  - name: a\n", "  - name: a\n    knobs: {/proc/sys/kernel/sched_rr_timeslice_ms: .inf}\n",
     "variants[0].knobs (line 6)", "value must be a finite number"),
    ("  - name: a\n", f"  - name: a\n    knobs: {{/proc/sys/kernel/x: {'1' * 5000!r}}}\n",
     "variants[0].knobs (line 6)", "value longer than 4096 characters"),
    # what study list and campaign check print: an escape sequence could rewrite the terminal
    ("iterations: 1", 'iterations: 1\ndescription: "ok\\e[2J\\e[Hall clear"', "description (line 4)",
     "holds the control character '\\x1b'"),
    ("  - name: a\n", '  - name: a\n    description: "\\e]0;title\\a"\n', "variants[0].description (line 6)",
     "holds the control character '\\x1b'"),
])
def test_names_and_knob_values_are_bounded(capsys, tmp_path, old, new, key, expected):
    _campaign_refused(capsys, tmp_path, _spec(tmp_path, **{old: new}), key, expected)


@pytest.mark.parametrize("knob", ["/proc/sys/kernel/core_pattern", "/proc/sys/kernel/core_*",
                                  "/proc/sys/*/modprobe", "/sys/kernel/uevent_helper", "/proc/1/mem",
                                  "/proc/sysrq-trigger", "/proc/sys/fs/binfmt_misc/register"])
def test_knobs_cannot_make_the_kernel_run_a_program(capsys, tmp_path, knob):
    """``core_pattern: "|prog"`` and the other usermode-helper files run a program as root at
    the kernel's next occasion; /proc/<pid>/ files reach other processes."""
    spec = _spec(tmp_path, **{"  - name: a\n": f"  - name: a\n    knobs: {{{knob}: '|/bin/touch {tmp_path}/PWNED'}}\n"})
    _campaign_refused(capsys, tmp_path, spec, "variants[0].knobs (line 6)", "the kernel runs the program")
    kernel = _write(_kernel_tree(tmp_path) / "s" / "v.yml",
                    f"name: v\nconfigs: [../configs/f.config]\nknobs:\n  {knob}: '|/bin/true'\n")
    line = _cli(capsys, "kernel", "check", str(kernel))
    assert line.startswith(f"lisa-ext kernel: error: {kernel}: knobs.{knob} (line 4): "), line


def test_knob_writer_refuses_such_files_whatever_the_caller():
    """The second wall, for a glob that matched one on the target or a caller without a spec
    check: nothing is written (the shell below records every command and writes nothing)."""
    from lisa_ext.knobs import KnobError, apply_knobs

    class Shell:
        commands: list[str] = []

        def execute(self, command, **kwargs):
            self.commands.append(command)
            return "/proc/sys/kernel/core_pattern\n" if command.startswith("for f in") else ""

    shell = Shell()
    for knob in ("/proc/sys/kernel/core_pattern", "/sys/kernel/debug/x*"):
        with pytest.raises(KnobError, match="refusing to write /proc/sys/kernel/core_pattern"):
            apply_knobs(shell, [(knob, "|/bin/touch /tmp/x")])
    assert not any("printf" in c or ">" in c for c in shell.commands), shell.commands


def test_trace_events_are_bounded(capsys, tmp_path):
    events = ", ".join(["sched:sched_switch"] * 1001)
    spec = _spec(tmp_path, **{"iterations: 1": f"iterations: 1\ntrace: {{events: [{events}]}}"})
    _campaign_refused(capsys, tmp_path, spec, "trace.events (line 4): 1001 events; at most 1000")


def test_a_hostile_key_cannot_break_the_one_line_message(capsys, tmp_path):
    spec = _spec(tmp_path, **{"iterations: 1": 'iterations: 1\n"x\\n\\e[2Jy": 1'})
    _campaign_refused(capsys, tmp_path, spec, "x\\n\\x1b[2Jy (line 4): unknown key")


@pytest.mark.parametrize("options, key, expected", [
    ("{rw: read, numjobs: abc}", "options.numjobs", "expected an integer from 1 to 4096"),
    ("{rw: read, numjobs: 100000000}", "options.numjobs", "expected an integer from 1 to 4096"),
    ("{rw: read, runtime: forever}", "options.runtime", "expected a time up to 86400 s"),
    ("{rw: read, runtime: .inf}", "options.runtime", "expected a finite number"),
    ("{rw: read, size: [1, 2]}", "options.size", "expected a string or a number"),
])
def test_fio_values_out_of_range(capsys, tmp_path, options, key, expected):
    spec = _spec(tmp_path, text=FIO_SPEC.format(target=LOCAL_TARGET),
                 **{"{rw: read, size: 1M, runtime: 1}": options})
    _campaign_refused(capsys, tmp_path, spec, f"workloads[0].{key}", expected)


@pytest.mark.parametrize("kind, extra, key, expected", [
    ("rtapp", "duration-s: 1\n    tasks: {t: {duty-cycle-pct: 5, period-ms: .nan}}", "tasks.t.period-ms",
     "expected a finite number"),
    ("rtapp", "duration-s: 1\n    tasks: {t: {duty-cycle-pct: 5, period-ms: 2, cpus: [100000]}}",
     "tasks.t.cpus", "CPU numbers (0 to 4095)"),
    ("schbench", "runtime-s: 100000000000", "runtime-s", "expected an integer from 1 to 86400"),
    ("pgbench", "duration-s: 5\n    scale: 100000000", "scale", "expected an integer from 1 to 10000"),
    ("cyclictest", "duration-s: 5\n    histogram-us: 1000000000000", "histogram-us",
     "expected an integer from 1 to 1000000"),
    ("ebizzy", "duration-s: 5\n    threads: 0", "threads", "expected an integer from 1 to 4096"),
    ("fio", "options: {rw: read}\n    dm-crypt: {backing: loop, size-mb: 100000000000}", "dm-crypt.size-mb",
     "expected an integer from 1 to 1048576"),
])
def test_workload_values_out_of_range(capsys, tmp_path, kind, extra, key, expected):
    spec = _spec(tmp_path, **{"kind: hackbench\n    groups: 1\n    loops: 10": f"kind: {kind}\n    {extra}"})
    _campaign_refused(capsys, tmp_path, spec, f"workloads[0].{key}", expected)


def test_target_config_values_out_of_range(capsys, tmp_path):
    target = _write(tmp_path / "target.yml", "target-conf: {kind: host}\nlisa-ext: {reset-timeout-s: .inf}\n")
    spec = _spec(tmp_path, text=SPEC.format(target=target))
    _campaign_refused(capsys, tmp_path, spec, "lisa-ext.reset-timeout-s (line 2): expected a finite number",
                      file=target)


@pytest.mark.parametrize("body, key, expected", [
    ("idle-states: [{name: WFI, exit-latency-us: .inf, target-residency-us: 1}]", "idle-states[0]",
     "numbers from 0 to 10000000 (us)"),
    ("idle-states: [{name: WFI, exit-latency-us: 1, target-residency-us: -1}]", "idle-states[0]",
     "numbers from 0 to 10000000 (us)"),
    ("clusters: [[0, 1000000000000]]", "clusters", "CPUs 0 to 4095"),
    ("idle-states-per-cpu: {'99999999999999': []}", "idle-states-per-cpu.99999999999999",
     "expected a CPU number from 0 to 4095"),
])
def test_platform_description_values_out_of_range(tmp_path, body, key, expected):
    """``lisa-ext analyse --platform FILE``'s reader (an infinite latency was an OverflowError)."""
    from lisa_ext.analysis.platform import load_platform_yaml
    from lisa_ext.errors import SpecError

    path = _write(tmp_path / "platform.yml", body + "\n")
    with pytest.raises(SpecError) as err:
        load_platform_yaml(path)
    assert str(err.value).startswith(f"{path}: {key}: ") and expected in str(err.value)


def test_energy_model_is_read_with_bounds(tmp_path):
    from lisa_ext.energy_model import load_model
    from lisa_ext.errors import SpecError

    for text, where in (("[" * 200_000, "energy model: larger than"), ("[" * 50_000, "top level: not an energy"),
                        (b'{"a": "\xff"}', "byte 7 (line 1): not UTF-8")):
        path = _write(tmp_path / "em.json", text)
        with pytest.raises(SpecError, match=re.escape(f"{path}: {where}")):
            load_model(path)


def _kernel_tree(tmp_path: Path) -> Path:
    """``kernels/`` with one config fragment, as a study's kernel specs would have it."""
    _write(tmp_path / "kernels" / "configs" / "f.config", "CONFIG_SMP=y\n")
    return tmp_path / "kernels"


@pytest.mark.parametrize("patch", ["../../../../../../../../etc/passwd", "/etc/passwd", "~/../../etc/passwd",
                                   "link.patch"])
def test_kernel_spec_paths_stay_in_the_spec_tree(capsys, tmp_path, patch):
    kernels = _kernel_tree(tmp_path)
    (kernels / "s").mkdir()
    (kernels / "s" / "link.patch").symlink_to("/etc/passwd")
    spec = _write(kernels / "s" / "v.yml", f"name: v\nconfigs: [../configs/f.config]\npatches: ['{patch}']\n")
    line = _cli(capsys, "kernel", "check", str(spec))
    assert line.startswith(f"lisa-ext kernel: error: {spec}: patches[0] (line 3): "), line
    assert f"is /etc/passwd, outside the spec's tree: a patch or config fragment must lie in {kernels}" in line


def test_kernel_spec_in_the_tree_and_shared_fragments_are_fine(capsys, tmp_path):
    kernels = _kernel_tree(tmp_path)
    spec = _write(kernels / "s" / "v.yml", f"name: v\nconfigs: [../configs/f.config, "
                                           f"{REPO}/kernels/configs/vboard.config]\n")
    assert main(["kernel", "check", str(spec)]) == 0
    assert "ok: variant 'v'" in capsys.readouterr().out


# -- no option injection --------------------------------------------------------------------

@pytest.fixture()
def git_base(tmp_path, monkeypatch) -> Path:
    """A real local git repository holding a (tiny) kernel tree, tagged v1; a private cache."""
    monkeypatch.setenv("LISA_EXT_CACHE", str(tmp_path / "cache"))
    repo = tmp_path / "linux"
    _write(repo / "Makefile", "VERSION = 6\n")
    _write(repo / "Kconfig", "")
    for args in (["init", "--quiet"], ["add", "--all"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "v1"], ["tag", "v1"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    return repo


def _git_spec(tmp_path: Path, url: str, ref: str) -> Path:
    _kernel_tree(tmp_path)
    return _write(tmp_path / "kernels" / "s" / "v.yml",
                  f"name: v\nbase: {{git: '{url}', ref: '{ref}'}}\nconfigs: [../configs/f.config]\n")


def _upload_pack(marker: Path) -> str:
    return f"--upload-pack=touch {marker}; git-upload-pack"


@pytest.mark.parametrize("command", [["kernel", "check"], ["kernel", "build"], ["vboard", "up", "--variant"]])
def test_hostile_git_ref_is_refused_and_never_runs(capsys, tmp_path, git_base, command):
    marker = tmp_path / "PWNED"
    spec = _git_spec(tmp_path, str(git_base), _upload_pack(marker))
    line = _cli(capsys, *command, str(spec))
    assert line.startswith(f"lisa-ext {command[0]}: error: {spec}: base.ref (line 2): "), line
    assert "starts with '-', which a program would read as an option; not a git ref" in line
    assert not marker.exists()
    # nor did a refused spec start building the board's QEMU (it would outlive the command)
    assert not any(thread.name == "qemu-build" for thread in threading.enumerate())


@pytest.mark.parametrize("url, expected", [
    ("--upload-pack=touch {marker}", "starts with '-'"),
    ("ext::sh -c touch% {marker}", "holds whitespace"),
    ("ext::sh%20-c%20touch%25%20{marker}", "transport 'ext' is not allowed"),
    ("fd::3", "transport 'fd' is not allowed"),
    ("ssh://-oProxyCommand=touch%20{marker}/x", "host '-oProxyCommand=touch%20"),
    ("-oProxyCommand=touch%20{marker}:x", "starts with '-'"),
])
def test_hostile_git_url_is_refused(capsys, tmp_path, git_base, url, expected):
    marker = tmp_path / "PWNED"
    spec = _git_spec(tmp_path, url.format(marker=marker), "v1")
    line = _cli(capsys, "kernel", "build", str(spec))
    assert line.startswith(f"lisa-ext kernel: error: {spec}: base.git (line 2): "), line
    assert expected in line
    assert not marker.exists()


def test_git_gets_refs_and_urls_after_the_options(tmp_path, git_base):
    """The second wall, below the spec check: a ref or URL that reached git anyway is a
    ref or a repository to git, never an option (``--``, ``--end-of-options``)."""
    from lisa_ext.kernel.tree import tree_key

    marker = tmp_path / "PWNED"
    with pytest.raises(UserError, match="not found"):
        tree_key(BaseTree("git", str(git_base), _upload_pack(marker)))
    with pytest.raises(UserError, match="clone failed"):
        tree_key(BaseTree("git", _upload_pack(marker), "v1"))
    assert not marker.exists()
    assert tree_key(BaseTree("git", str(git_base), "v1")).startswith("git-")  # the ordinary case works


def test_campaign_checks_its_kernel_variants_before_running(capsys, tmp_path, git_base):
    marker = tmp_path / "PWNED"
    kernel = _git_spec(tmp_path, str(git_base), _upload_pack(marker))
    spec = _spec(tmp_path, **{"  - name: a\n": f"  - name: a\n    kernel: {kernel}\n"})
    line = _cli(capsys, "campaign", "run", str(spec), "-o", str(tmp_path / "out"))
    assert line.startswith(f"lisa-ext campaign: error: {kernel}: base.ref (line 2): "), line
    assert not (tmp_path / "out").exists() and not marker.exists()


@pytest.mark.parametrize("key, value, expected", [
    ("username", "-oProxyCommand=touch {marker}", "starts with '-'"),
    ("host", "-oProxyCommand=touch {marker}", "starts with '-'"),
    ("host", "board -oProxyCommand=x", "holds whitespace"),
    ("username", "root\\n-oProxyCommand=x", "holds whitespace or a control character"),
    ("host", "root@board", "'@' belongs in target-conf.username"),
    ("host", "board;touch${IFS}{marker}", "is not a host name or address"),
    ("port", 70000, "expected a TCP port from 1 to 65535"),
    ("workdir", "/tmp/w\\nexec_prerun=touch {marker}", "holds whitespace or a control character"),
])
def test_target_config_refuses_option_like_ssh_words(capsys, tmp_path, key, value, expected):
    marker = tmp_path / "PWNED"
    value = f'"{value.replace("{marker}", str(marker))}"' if isinstance(value, str) else value
    conf = {"kind": "linux", "host": "board", "username": "root", "port": 22}
    conf[key] = value
    body = "".join(f"  {k}: {v}\n" for k, v in conf.items())
    target = _write(tmp_path / "board.yml", f"target-conf:\n{body}")
    spec = _spec(tmp_path, text=SPEC.format(target=target))
    _campaign_refused(capsys, tmp_path, spec, f"target-conf.{key}: ", expected, file=target)
    assert not marker.exists()


@pytest.mark.parametrize("device, expected", [("-H evil", "starts with '-'"),
                                              ("x;touch${IFS}{marker}", "is not an adb serial")])
def test_android_serial_cannot_be_an_option_or_shell_text(capsys, tmp_path, device, expected):
    """devlib puts the serial unquoted into adb command lines it runs with a shell."""
    marker = tmp_path / "PWNED"
    target = _write(tmp_path / "phone.yml", f"target-conf: {{kind: android, device: '{device}'}}\n"
                    .replace("{marker}", str(marker)))
    spec = _spec(tmp_path, text=SPEC.format(target=target))
    _campaign_refused(capsys, tmp_path, spec, "target-conf.device: ", expected, file=target)
    assert not marker.exists()


@pytest.mark.parametrize("conf, key, expected", [
    ("devlib: {platform: {class: subprocess.Popen, args: {args: 'touch {marker}', shell: true}}}",
     "devlib.platform.class", "is not a class of devlib.platform"),
    ("kernel: {modules: {make-variables: {CC: 'sh -c \"touch {marker}\"'}}}",
     "kernel.modules.make-variables.CC", "a make variable is a name and one word"),
])
def test_target_config_cannot_name_a_program_to_run(capsys, tmp_path, conf, key, expected):
    """LISA imports the platform class by name and calls it with the config's arguments at
    connect (``subprocess.Popen`` ran a command on main); make variables choose the compiler."""
    marker = tmp_path / "PWNED"
    target = _write(tmp_path / "host.yml", f"target-conf:\n  kind: host\n  {conf.replace('{marker}', str(marker))}\n")
    spec = _spec(tmp_path, text=SPEC.format(target=target))
    _campaign_refused(capsys, tmp_path, spec, f"target-conf.{key}: ", expected, file=target)
    assert not marker.exists()


@pytest.mark.parametrize("options, key, expected", [
    ("{rw: read, exec_prerun: 'touch {marker}'}", "exec_prerun", "runs a program on the target"),
    ("{rw: read, exec_postrun: 'touch {marker}'}", "exec_postrun", "runs a program on the target"),
    ("{rw: read, ioengine: exec, program: touch, arguments: '{marker}'}", "ioengine", "not exec"),
    ("{rw: read, ioengine: 'external:/tmp/evil.so'}", "ioengine", "not exec, a library path"),
    ("{rw: 'read; exec_prerun=touch {marker}'}", "rw", "may not hold ';'"),
    ("{rw: \"read\\nexec_prerun=touch {marker}\"}", "rw", "a line break"),
    ("{filename: '${HOME}/x'}", "filename", "may not hold ';', '#', '${'"),
    ("{rw: read, '--exec_prerun': x}", "--exec_prerun", "not a fio option name"),
    ("{rw: read, output: x}", "output", "set by lisa-ext itself"),
])
def test_fio_options_cannot_run_programs(capsys, tmp_path, options, key, expected):
    marker = tmp_path / "PWNED"
    spec = _spec(tmp_path, text=FIO_SPEC.format(target=LOCAL_TARGET),
                 **{"{rw: read, size: 1M, runtime: 1}": options.replace("{marker}", str(marker))})
    _campaign_refused(capsys, tmp_path, spec, f"workloads[0].options.{key}", expected)
    assert not marker.exists()


def test_dm_crypt_backing_is_a_device_path(capsys, tmp_path):
    """The backing device is a word of dmsetup's table, inside double quotes of the target's shell."""
    spec = _spec(tmp_path, text=FIO_SPEC.format(target=LOCAL_TARGET),
                 **{"runtime: 1}": f"runtime: 1}}\n    dm-crypt: {{backing: '/dev/vdb$(touch {tmp_path}/PWNED)'}}"})
    _campaign_refused(capsys, tmp_path, spec, "workloads[0].dm-crypt.backing", "must be loop or a /dev/ path")


@pytest.mark.parametrize("extra, key, expected", [
    ("user: '-x'", "user", "not a user name"),
    ("user: \"postgres\\n\"", "user", "not a user name"),
    ("user: 'postgres; touch {marker}'", "user", "not a user name"),
    ("socket-dir: '-x'", "socket-dir", "expected an absolute path"),
    ("socket-dir: '/tmp/a,/tmp/b'", "socket-dir", "expected an absolute path"),
    ("socket-dir: '/tmp/$(touch {marker})'", "socket-dir", "expected an absolute path"),
    ("server-settings: {\"shared_buffers\\n\": 1}", "server-settings", "PostgreSQL setting name"),
    ("server-settings: {work_mem: .inf}", "server-settings", "finite number"),
    ("server-settings: {archive_mode: 'on', archive_command: 'touch {marker}'}", "server-settings",
     "archive_command runs a command"),
    ("server-settings: {shared_preload_libraries: '/tmp/evil.so'}", "server-settings", "loads a library"),
])
def test_pgbench_names_are_validated(capsys, tmp_path, extra, key, expected):
    marker = tmp_path / "PWNED"
    extra = extra.replace("{marker}", str(marker))
    spec = _spec(tmp_path, **{"kind: hackbench\n    groups: 1\n    loops: 10":
                              f"kind: pgbench\n    duration-s: 5\n    {extra}"})
    _campaign_refused(capsys, tmp_path, spec, f"workloads[0].{key}", expected)
    assert not marker.exists()


def test_pgbench_quotes_the_user_it_runs_as():
    from lisa_ext.campaign.workloads.pgbench import Pgbench

    assert Pgbench("p", {"duration-s": 5, "user": "pg-bench"})._as_user("pgbench") == \
        "runuser -u pg-bench -- pgbench"


@pytest.mark.parametrize("command", ["touch {marker}", "/usr/bin/env", "wa run", "/opt/../bin/wa"])
def test_wa_command_names_wa_only(capsys, tmp_path, command):
    marker = tmp_path / "PWNED"
    command = command.replace("{marker}", str(marker))
    spec = _spec(tmp_path, **{"kind: hackbench\n    groups: 1\n    loops: 10":
                              f"kind: wa\n    workload: geekbench\n    wa-command: '{command}'"})
    _campaign_refused(capsys, tmp_path, spec, "workloads[0].wa-command", "expected wa or an absolute path")
    assert not marker.exists()


@pytest.mark.live
def test_fio_reads_options_from_a_job_file_where_prefixes_do_not_match(tmp_path):
    """On the fio command line ``--exec_pre`` would be ``--exec_prerun`` and ``--serve``
    ``--server``; in the job file lisa-ext writes they are unknown options: fio refuses the
    job, the run fails with fio's own message and nothing was executed."""
    require_live()
    marker = tmp_path / "PWNED"
    spec = _spec(tmp_path, text=FIO_SPEC.format(target=LOCAL_TARGET),
                 **{"{rw: read, size: 1M, runtime: 1}": "{rw: read, size: 1M, filename: data, "
                                                        f"exec_pre: 'touch {marker}'}}"})
    out = tmp_path / "campaign"
    proc = subprocess.run(LISA_EXT + ["campaign", "run", str(spec), "-o", str(out), "--no-progress"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"fio could not lay out its data file: Bad option <exec_pre=touch {marker}>" in proc.stderr
    assert not marker.exists()


# -- every number has a documented range ------------------------------------------------------

def _schemas():
    yield "", _TOP_SCHEMA
    yield "smoke.", _SMOKE_SCHEMA
    yield "trace.", _TRACE_SCHEMA
    yield "requires.", REQUIREMENTS_SCHEMA
    for kind, cls in sorted(WORKLOAD_KINDS.items()):
        yield f"{kind}: ", cls.SCHEMA
    yield "rtapp: tasks.<name>.", _TASK_SCHEMA
    yield "rtapp: tasks.<name>.phases[].", _PHASE_SCHEMA
    yield "fio: dm-crypt.", CRYPT_SCHEMA
    yield "target config: lisa-ext.", _EXTRA_SCHEMA


def test_every_number_has_a_range_stated_in_the_docs():
    docs = (REPO / "docs" / "campaigns.md").read_text()
    missing = []
    for where, schema in _schemas():
        for key, field in schema.items():
            if not {int, float} & set(field.types):
                continue
            assert field.bounds is not None, f"{where}{key} has no bounds"
            row = f"| `{where}{key}` | {field.range_text()} |"
            if row not in docs:
                missing.append(row)
    assert not missing, "docs/campaigns.md lacks the rows:\n" + "\n".join(missing)


def test_fio_job_file_is_the_spec_options_one_per_line(tmp_path):
    from lisa_ext.campaign.workloads.fio import Fio, runtime_s

    class Target:
        working_directory = "/w"
        path = __import__("posixpath")

    class Ctx:
        target = Target()

    job = Fio("w", {"options": {"rw": "randread", "bs": "4k", "direct": True, "numjobs": 2, "runtime": "2m"}})
    assert job.job_file(Ctx()) == ("[w]\nrw=randread\nbs=4k\ndirect=1\nnumjobs=2\nruntime=2m\n"
                                   "directory=/w/lisa-ext-fio\n")
    assert job._timeout() == 10 * 120 + 60
    assert [runtime_s(v) for v in (5, "5", "90s", "500ms", "2h", "1d", "soon", "5 s")] == \
        [5, 5, 90, 0.5, 7200, 86400, None, None]
