"""The QEMU virtual board: a TCG guest that runs lisa-ext's kernel variants.

* :mod:`lisa_ext.vboard.rootfs` builds the Debian rootfs once (debootstrap, then
  ``mkfs.ext4 -d``) and the small per-boot disk carrying a variant's modules.
* :mod:`lisa_ext.vboard.qemu` launches and stops ``qemu-system-x86_64``.
* :mod:`lisa_ext.vboard.board` ties both together: boot a kernel, reach the guest
  over SSH on a loopback port, report its state; it is what the CLI, LISA's
  target configuration and :mod:`lisa_ext.kernel.deploy` use.

What is emulated, honestly: the guest runs real kernel code for governor
decisions (menu, teo, schedutil, ondemand), idle misses, OPP choices and
workqueue placement, driven by the platform-emulation modules of the kernel
variant. Time runs on a TCG-emulated CPU about 30x slower than the host, so
latencies, performance and energy are not those of any real SoC.

Importing this package has no side effects.
"""

__all__: list[str] = []
