"""Each run's kernel provenance, read by one command on this machine's own shell.

The oracle is the machine itself: ``uname``, ``/proc/sys/kernel/random/boot_id`` and the
config's hash computed here by Python. Within one boot the config hash of the previous run is
reused (the board pays every command in guest time); another boot id computes it again.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import platform
from pathlib import Path

import pytest

from lisa_ext.target.facts import kernel_provenance
from test_knob_writes import CountingShell

BOOT_ID = Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def _config_sha256() -> str | None:
    for path, opener in ((Path("/proc/config.gz"), gzip.open), (Path(f"/boot/config-{os.uname().release}"), open)):
        if path.exists():
            with opener(path, "rb") as f:
                return hashlib.sha256(f.read()).hexdigest()
    return None


def test_one_command_reads_what_the_machine_says():
    shell = CountingShell()
    facts = kernel_provenance(shell)
    assert len(shell.commands) == 1
    assert facts["release"] == platform.release() and facts["version"] == platform.version()
    assert facts["machine"] == platform.machine() and facts["boot_id"] == BOOT_ID
    assert facts["cmdline"] == Path("/proc/cmdline").read_text().strip()
    assert facts["config_sha256"] == _config_sha256()
    assert facts["emulation"] == {}  # no emulation module loaded here


def test_the_same_boot_reuses_the_config_hash_and_another_boot_computes_it():
    first = kernel_provenance(CountingShell())
    shell = CountingShell()
    again = kernel_provenance(shell, {**first, "config_sha256": "kept-from-the-last-run"})
    assert again["config_sha256"] == "kept-from-the-last-run"
    assert "sha256sum" not in shell.commands[0].split("then echo same-boot; else")[0]
    other_boot = {**first, "boot_id": "00000000-0000-4000-8000-000000000000", "config_sha256": "stale"}
    assert kernel_provenance(CountingShell(), other_boot)["config_sha256"] == _config_sha256()


@pytest.mark.parametrize("boot_id", ["$(touch /tmp/x)", BOOT_ID + "; true", None, 7])
def test_a_previous_boot_id_that_is_not_a_uuid_never_reaches_the_shell(boot_id):
    shell = CountingShell()
    facts = kernel_provenance(shell, {"boot_id": boot_id, "config_sha256": "stale"})
    assert facts["config_sha256"] == _config_sha256()
    assert "same-boot" not in shell.commands[0]  # no comparison with it was even written
