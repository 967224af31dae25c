"""A board's first deploy builds what its boot needs in threads of its own process.

The kernel build keeps both cores busy but for its tree import, configuration and link steps;
the patched QEMU (:mod:`lisa_ext.vboard.qemu_build`) and the Debian rootfs
(:mod:`lisa_ext.vboard.rootfs`, mostly downloads and unpacking) are built beside it rather than
after it. Whoever then needs one calls its builder again: the builder's file lock makes it wait
for the thread's build, or it builds (and raises) itself; the thread only logs a failure.

A process that ends while such a build runs (its kernel build failed, say) waits for it: the
build's lock dies with the process, and a build left running without it would have its tree
deleted under it by the next one.
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
from collections.abc import Callable

__all__ = ["start"]

log = logging.getLogger(__name__)

_running: list[threading.Thread] = []


def start(name: str, build: Callable[[], object]) -> threading.Thread:
    """Run ``build`` in a daemon thread called ``name``; its error is logged, not raised."""

    def run() -> None:
        try:
            build()
        except Exception as exc:  # raised again to the boot that needs what it builds
            log.debug("%s in the background failed: %s", name, exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    if not _running:
        atexit.register(_wait_for_builds)
    _running.append(thread)
    thread.start()
    return thread


def _wait_for_builds() -> None:
    alive = [thread for thread in _running if thread.is_alive()]
    if alive:
        print(f"waiting for the background {', '.join(t.name for t in alive)} to finish "
              "(Ctrl-C stops it; the next board run starts it over)", file=sys.stderr)
    try:
        for thread in alive:
            thread.join()
    except KeyboardInterrupt:
        pass
