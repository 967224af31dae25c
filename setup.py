"""Build hook for the native parts of lisa_ext (compiled during ``pip install``).

``lisa_ext.trace._tracedat`` is the trace.dat page decoder. It links the
system's libzstd and zlib (Debian: libzstd-dev, zlib1g-dev, installed by
scripts/install-system-packages.sh).
"""

from setuptools import Extension, setup

EXT_MODULES: list = [
    Extension(
        "lisa_ext.trace._tracedat",
        sources=["lisa_ext/trace/_tracedat.c"],
        libraries=["zstd", "z"],
        extra_compile_args=["-O2", "-std=gnu11", "-pthread", "-Wall", "-Wno-unused-function"],
        extra_link_args=["-pthread"],
    ),
]

setup(ext_modules=EXT_MODULES)
