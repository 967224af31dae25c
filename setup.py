"""Build hooks for lisa_ext: the native parts, the LISA import hook, the workbench files.

``lisa_ext_lisa_hook.pth`` is copied to the root of site-packages by both a
regular ``pip install .`` and the editable ``pip install -e .`` that ``make``
runs: Python executes its line at start-up, which installs the finder of
:mod:`lisa_ext.lisa_hook` (a no-op if lisa_ext cannot be imported).

``lisa_ext.trace._tracedat`` is the trace.dat page decoder. It links the
system's libzstd and zlib (Debian: libzstd-dev, zlib1g-dev, installed by
scripts/install-system-packages.sh).
"""

import os
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HOOK_PTH = "lisa_ext_lisa_hook.pth"
#: the workbench's input directories, shipped to <prefix>/share/lisa-ext so a
#: regular install runs studies and builds kernels (see lisa_ext/workbench.py)
WORKBENCH_DIRS = ("campaigns", "kernels", "notebooks", "target-configs")


def workbench_data_files() -> list[tuple[str, list[str]]]:
    out = []
    for top in WORKBENCH_DIRS:
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__")))
            files = sorted(os.path.join(dirpath, f) for f in filenames
                           if not f.startswith(".") and not f.endswith((".pyc", ".ko", ".o")))
            if files:
                out.append((str(Path("share", "lisa-ext", dirpath)), files))
    return out


class BuildPyWithHook(build_py):
    """build_py that also puts :data:`HOOK_PTH` at the root of the wheel."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            # editable_wheel installs into the unpacked wheel's root, which is
            # what becomes site-packages; build_lib is not shipped in that mode
            root = self.get_finalized_command("install").install_lib
        else:
            root = self.build_lib
        self.copy_file(HOOK_PTH, os.path.join(root, HOOK_PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        if not self.editable_mode:
            outputs.append(os.path.join(self.build_lib, HOOK_PTH))
        return outputs


EXT_MODULES: list = [
    Extension(
        "lisa_ext.trace._tracedat",
        sources=["lisa_ext/trace/_tracedat.c"],
        libraries=["zstd", "z"],
        extra_compile_args=["-O2", "-std=gnu11", "-pthread", "-Wall", "-Wno-unused-function"],
        extra_link_args=["-pthread"],
    ),
]

setup(ext_modules=EXT_MODULES, cmdclass={"build_py": BuildPyWithHook},
      data_files=workbench_data_files())
