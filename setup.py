"""Build hook for the native parts of lisa_ext (compiled during ``pip install``)."""

from setuptools import setup

EXT_MODULES: list = []

setup(ext_modules=EXT_MODULES)
