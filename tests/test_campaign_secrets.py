"""No private key, password or token is written into a campaign's data or its report.

A short live campaign runs on this machine through a target config that names a
password and an SSH key file; everything the campaign and ``lisa-ext report``
wrote is then scanned, bytes and all (trace.dat included), for the password,
``PRIVATE KEY`` and every line of the private keys (this test's and the virtual
board's, when this machine has one).
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from campaign_helpers import LISA_EXT, LOCAL_TARGET, require_live

pytestmark = pytest.mark.live

VBOARD_KEY = Path.home() / ".cache" / "lisa-ext" / "vboard" / "ssh" / "id_ed25519"


def _key_lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().splitlines() if line and b"PRIVATE KEY" not in line]


def test_campaign_outputs_hold_no_secrets(tmp_path):
    require_live()
    password = f"pw-{uuid.uuid4().hex}"
    key = tmp_path / "id_test"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    target = tmp_path / "target.yml"
    # this machine's target config, with the credentials an SSH board's would carry
    target.write_text(LOCAL_TARGET.read_text().replace(
        "target-conf:\n", f"target-conf:\n  password: {password}\n  keyfile: {key}\n", 1))
    spec = tmp_path / "secrets.yml"
    spec.write_text(f"""\
name: secrets
target: {target}
iterations: 2
trace:
  events: [sched:sched_switch, sched:sched_wakeup]
variants:
  - name: a
  - name: b
workloads:
  - name: io
    kind: fio
    options: {{rw: randread, bs: 4k, ioengine: psync, size: 4M, runtime: 1, time_based: 1}}
""")
    out = tmp_path / "campaign"
    proc = subprocess.run(LISA_EXT + ["campaign", "run", str(spec), "--out", str(out), "--no-progress"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr
    report = subprocess.run(LISA_EXT + ["report", str(out), "--no-html"], capture_output=True, text=True,
                            cwd=tmp_path, timeout=900)
    assert report.returncode == 0, report.stderr

    secrets = [password.encode(), b"PRIVATE KEY", *_key_lines(key)]
    if VBOARD_KEY.is_file():
        secrets += _key_lines(VBOARD_KEY)
    scanned = 0
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        data = path.read_bytes()
        scanned += 1
        for secret in secrets:
            assert secret not in data, f"{path} holds secret material ({secret[:12]!r}...)"
    assert scanned >= 10 and (out / "report" / "README.md").is_file()
    for text in (proc.stdout, proc.stderr, report.stdout, report.stderr):
        assert password not in text and "PRIVATE KEY" not in text
