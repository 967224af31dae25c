"""Targets: the machines experiments run on, behind one protocol.

- :mod:`~lisa_ext.target.config` -- a target config, read and checked once (:class:`TargetConfig`);
- :mod:`~lisa_ext.target.protocol` -- what lisa-ext needs from any target (:class:`Target`);
- :mod:`~lisa_ext.target.board` -- the virtual board; :mod:`~lisa_ext.target.ssh_target` -- a
  Linux board over SSH; :mod:`~lisa_ext.target.devlib_target` -- this machine and Android
  devices, and the LISA/devlib connection every kind opens (host keys checked on each);
- :mod:`~lisa_ext.target.facts` -- kernel, cache and tool facts for provenance and checks.
- :mod:`~lisa_ext.target.timing` -- the emulation modules' timing switch and parameters.

:func:`open_target` asks each implementation, most specific first, whether it
serves a config: nothing else decides which kind of target a config is. A new
kind of target is one more implementation of the protocol, listed there.
"""

from __future__ import annotations

import os
from typing import Any

from lisa_ext.target.board import CLOCKS, CLOCKS_HELP, DEFAULT_CLOCK, BoardTarget
from lisa_ext.target.config import TargetConfig
from lisa_ext.target.devlib_target import DevlibTarget
from lisa_ext.target.facts import (kernel_provenance, lisa_platform_info, llc_domains, platform_provenance, tool_versions,
                                   tracefs_root)
from lisa_ext.target.protocol import BootImage, FirstBoot, Target, TargetCommandError
from lisa_ext.target.ssh_target import SshTarget

__all__ = ["BootImage", "CLOCKS", "CLOCKS_HELP", "DEFAULT_CLOCK", "FirstBoot", "Target", "TargetCommandError",
           "TargetConfig", "connect", "first_boot_needs", "kernel_provenance", "lisa_platform_info", "llc_domains",
           "open_target", "platform_provenance", "tool_versions", "tracefs_root"]

#: the implementations of the protocol, most specific first
IMPLEMENTATIONS = (BoardTarget, SshTarget, DevlibTarget)


def open_target(config: TargetConfig | str | os.PathLike) -> Target:
    """The :class:`Target` a config (or a config file) describes. SSH targets connect on first
    command; this machine and Android devices connect now (LISA is their only way in)."""
    if not isinstance(config, TargetConfig):
        config = TargetConfig.load(config)
    impl = next(impl for impl in IMPLEMENTATIONS if impl.serves(config))
    return impl.open(config)


def first_boot_needs(config: TargetConfig | str | os.PathLike) -> FirstBoot | None:
    """What a target a config describes needs built on this machine before its first run (the
    virtual board: its default kernel variant and its patched QEMU), None for a target that runs
    the kernel it has; nothing is opened, built or connected."""
    if not isinstance(config, TargetConfig):
        config = TargetConfig.load(config)
    impl = next(impl for impl in IMPLEMENTATIONS if impl.serves(config))
    return impl.first_boot_needs(config)


def connect(config: TargetConfig | str | os.PathLike) -> Any:
    """A connected LISA :class:`lisa.target.Target` for a target config (host key checked)."""
    return open_target(config).lisa()
