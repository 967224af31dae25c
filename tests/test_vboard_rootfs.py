"""The cached Debian rootfs image: built once (debootstrap, ~3 min), then reused.

Its content is checked from outside with e2fsprogs' debugfs, not through our code.
"""

import os
import subprocess

import pytest

from lisa_ext.vboard import rootfs

pytestmark = pytest.mark.vboard


def _require_root():
    if os.geteuid() != 0 and os.environ.get("CI") != "true":
        pytest.skip("building the rootfs needs root (debootstrap)")


def _debugfs(image, request):
    return subprocess.run(["debugfs", "-R", request, str(image)], capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture(scope="module")
def image():
    _require_root()
    return rootfs.ensure_rootfs()


def test_rootfs_holds_the_tools_and_our_init(image):
    for tool in ("/usr/sbin/sshd", "/usr/bin/trace-cmd", "/usr/bin/fio", "/usr/bin/rt-app",
                 "/usr/sbin/kexec", "/usr/bin/kmod", "/usr/bin/tini", "/usr/bin/ip"):
        out = _debugfs(image.image, f"stat {tool}")
        assert "Inode:" in out, f"{tool} missing from {image.image}"
    init = _debugfs(image.image, "cat /sbin/lisa-ext-init")
    packaged = (rootfs.resources.files("lisa_ext.vboard") / "init.sh").read_text()
    assert init == packaged
    assert "Mode:  0755" in _debugfs(image.image, "stat /sbin/lisa-ext-init")


def test_rootfs_authorises_this_cache_key_for_root(image):
    authorized = _debugfs(image.image, "cat /root/.ssh/authorized_keys")
    public = image.ssh_key.with_name(image.ssh_key.name + ".pub").read_text()
    assert authorized.strip() == public.strip()
    assert oct(image.ssh_key.stat().st_mode & 0o777) == "0o600"


def test_rootfs_is_cached(image):
    again = rootfs.ensure_rootfs()
    assert again.image == image.image
    assert again.image.stat().st_mtime_ns == image.image.stat().st_mtime_ns
