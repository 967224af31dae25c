"""Moved to :mod:`lisa_ext.knobs` (one knob implementation for campaigns and
kernel deploys); this name stays for code written against it."""

from lisa_ext.knobs import *  # noqa: F401,F403
from lisa_ext.knobs import __all__  # noqa: F401
