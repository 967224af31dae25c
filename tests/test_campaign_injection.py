"""Shell metacharacters in every user string that reaches a target: nothing executes.

Each payload would create a marker file if any layer handed it to a shell
unquoted. Strings the spec validators refuse must give a clean error naming the
file and field; strings they accept (fio option values, knob values, file
paths) must reach the target as data. Targets: this machine (the local host
target, as a campaign uses it) and the kernel-variant knob writer.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from campaign_helpers import LISA_EXT, LOCAL_TARGET, WQ_KNOB, require_live, write_spec
from lisa_ext.campaign.spec import load_spec
from lisa_ext.errors import SpecError

RUN = uuid.uuid4().hex[:8]
MARKERS: list[Path] = []


def _payloads() -> list[str]:
    out = []
    for i, template in enumerate(("; touch {m}", "$(touch {m})", "`touch {m}`", "' ; touch {m} ; '",
                                  '" ; touch {m} ; "', "\ntouch {m}\n", "&& touch {m}", "| touch {m}",
                                  "x; touch {m} #")):
        marker = Path(f"/tmp/PWNED_{RUN}_{i}")
        MARKERS.append(marker)
        out.append(template.format(m=marker))
    return out


PAYLOADS = _payloads()


@pytest.fixture(autouse=True)
def no_marker_left():
    yield
    made = [str(m) for m in MARKERS if m.exists()]
    for m in MARKERS:
        m.unlink(missing_ok=True)
    assert not made, f"a payload executed: {made}"


def _spec_text(variant: str = "v", workload: str = "w", knob_path: str = WQ_KNOB, knob_value: str = "cache",
               fio_value: str = "randread", event: str = "sched:sched_switch") -> str:
    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return f"""\
name: inj
target: @TARGET@
iterations: 1
trace:
  events: [{q(event)}]
variants:
  - name: {q(variant)}
    knobs: {{{q(knob_path)}: {q(knob_value)}}}
workloads:
  - name: {q(workload)}
    kind: fio
    options: {{rw: {q(fio_value)}, size: 1M, runtime: 1}}
"""


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("field,make", [
    ("variants[0].name", lambda p: _spec_text(variant=f"v{p}")),
    ("workloads[0].name", lambda p: _spec_text(workload=f"w{p}")),
    ("variants[0].knobs", lambda p: _spec_text(knob_path=f"/sys/kernel/x*{p}")),
    ("trace.events", lambda p: _spec_text(event=f"sched:x{p}")),
])
def test_spec_refuses_metacharacters_in_names_paths_events(tmp_path, payload, field, make):
    spec = write_spec(tmp_path / "inj.yml", make(payload))
    with pytest.raises(SpecError) as err:
        load_spec(spec)
    assert str(spec) in str(err.value) and field in str(err.value)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_kernel_variant_knob_paths_refuse_metacharacters(tmp_path, payload):
    from lisa_ext.kernel.spec import load_variant_spec

    path = tmp_path / "k.yml"
    config = Path(__file__).resolve().parents[1] / "kernels" / "configs" / "vboard.config"
    path.write_text(f"name: k\nconfigs: [{config}]\n"
                    f"knobs:\n  {_q(f'/sys/devices/system/cpu/cpu*/x{payload}')}: 1\n")
    with pytest.raises(SpecError) as err:
        load_variant_spec(path)
    assert "knobs." in str(err.value) and str(path) in str(err.value)


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@pytest.fixture(scope="module")
def local_target():
    require_live()
    from lisa_ext.target import open_target

    return open_target(LOCAL_TARGET)


@pytest.mark.live
def test_knob_writers_pass_payloads_as_data(local_target, tmp_path):
    """Campaign knobs (path and value) and the kernel-variant knob writer, on a real shell."""
    from lisa_ext.knobs import write_knob
    from lisa_ext.kernel.deploy import DeployError, _apply_knobs

    for i, payload in enumerate(PAYLOADS):
        knob = tmp_path / f"knob{i}{payload.replace('/', '_')}"
        knob.write_text("old\n")
        write_knob(local_target, str(knob), payload)
        assert knob.read_text() == payload  # written verbatim, through a file name full of metacharacters
        with pytest.raises(DeployError, match="refusing to hand it to the target's shell"):
            _apply_knobs(local_target, [(f"{tmp_path}/knob*{payload}", "1")])
        plain = tmp_path / "plain"
        try:
            _apply_knobs(local_target, [(str(plain), payload)])
        except DeployError as exc:
            assert "reads back" in str(exc)  # a value with newlines does not read back the same
        assert plain.read_text() == payload  # the value went through as data


#: payloads a fio job file would read as something else (a comment, a new option): refused up front
JOB_FILE_SYNTAX = [p for p in PAYLOADS if any(c in p for c in ";#\n")]


@pytest.mark.parametrize("payload", JOB_FILE_SYNTAX)
def test_fio_values_a_job_file_would_misread_are_refused(tmp_path, payload):
    spec = write_spec(tmp_path / "inj.yml", _spec_text(fio_value=payload))
    with pytest.raises(SpecError) as err:
        load_spec(spec)
    assert str(err.value).startswith(f"{spec}: workloads[0].options.rw: ")


@pytest.mark.live
def test_campaign_with_payloads_in_values_runs_them_as_data(tmp_path):
    """fio option values and knob values reach the target as data: fio refuses them, nothing runs."""
    require_live()
    accepted = [p for p in PAYLOADS if p not in JOB_FILE_SYNTAX]
    workloads = "\n".join(
        f"  - name: w{i}\n    kind: fio\n    options: {{rw: {_q(p)}, filename: {_q('inj' + p)}, "
        f"size: 1M, runtime: 1}}" for i, p in enumerate(accepted))
    spec = write_spec(tmp_path / "inj.yml", f"""\
name: inj
target: @TARGET@
iterations: 1
variants:
  - name: v
workloads:
{workloads}
""")
    out = tmp_path / "campaign"
    proc = subprocess.run(LISA_EXT + ["campaign", "run", str(spec), "--out", str(out), "--no-progress"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1  # every run failed: fio refuses such an rw value
    assert f"0 runs done, {len(accepted)} failed" in proc.stdout
    bad_value = write_spec(tmp_path / "knob.yml", _spec_text(knob_value=PAYLOADS[1]))
    proc = subprocess.run(LISA_EXT + ["campaign", "run", str(bad_value), "--out", str(tmp_path / "k")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    # the kernel refuses the value; the run fails with the value quoted, and the campaign goes on
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"could not write {PAYLOADS[1]!r} to {WQ_KNOB}" in proc.stderr
