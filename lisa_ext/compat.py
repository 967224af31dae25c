"""Compatibility layer that lets LISA 3.1.0 (PyPI ``lisa-linux``) run on numpy 2.

LISA 3.1.0 was released before numpy 2.0 and pandas 2.1 and has four problems on a current
stack. Each shim below names the LISA file it repairs; ``tests/test_compat.py``
runs the LISA code path each one fixes.

* ``lisa/analysis/tasks.py`` (``df_task_activation`` default argument, evaluated
  at import time), ``lisa/datautils.py`` and ``lisa/analysis/functions.py`` use
  ``np.NaN``, removed in numpy 2.0 -> :func:`lisa_ext.lisa_hook.shim_numpy_aliases` restores it as
  an alias of ``np.nan``.
* ``lisa/datautils.py`` (``series_integrate``) calls ``np.trapz``, removed in
  numpy 2.4 -> aliased to ``np.trapezoid``.
* ``lisa/monad.py`` imports ``nest_asyncio`` without declaring it: it is a
  dependency of ``lisa_ext`` (see pyproject.toml), nothing to patch at runtime.
* ``lisa/__init__.py`` installs a warnings filter turning every
  DeprecationWarning attributed to a ``lisa.*`` module into an exception. Any
  pandas/numpy deprecation triggered from inside LISA then kills a user's
  notebook cell -> :func:`lisa_ext.lisa_hook.relax_lisa_warning_filter` downgrades it to
  ``default`` (shown once per location, never raised).
* ``lisa/datautils.py`` (``series_convert``) passes pandas' ``convert_dtype``,
  deprecated in pandas 2.1 (same behaviour until pandas 3): a FutureWarning per
  converted frame, dozens per notebook cell ->
  :func:`lisa_ext.lisa_hook.hide_lisa_pandas_deprecation` hides that one message
  from that one module.

:mod:`lisa_ext.lisa_hook` applies these shims right before LISA is first
imported, so plain ``import lisa.trace`` works in the project's environment.

The shims only add missing attributes and edit one warnings filter; they never
replace behaviour that exists. :func:`quiet_lisa_logs` is the one place that
turns down LISA's and devlib's step-by-step logging for commands that show their
own progress (campaigns, studies, the quickstart).
"""

from __future__ import annotations

import importlib
import logging
import types
import warnings

from lisa_ext import lisa_hook

__all__ = ["apply", "import_lisa", "quiet_lisa_logs"]

_applied = False


def apply() -> None:
    """Apply every shim once, importing LISA's top-level package to fix its filter.

    Also installs :mod:`lisa_ext.lisa_hook` (normally done at start-up by the
    ``.pth`` file the package installs), so a ``Trace`` built after this call
    has lisa-ext's analyses even when running from a checkout on ``PYTHONPATH``.
    """
    global _applied
    if _applied:
        return
    lisa_hook.shim_numpy_aliases()
    lisa_hook.skip_iri_format_checker()
    lisa_hook.install()
    importlib.import_module("lisa")
    lisa_hook.relax_lisa_warning_filter()
    lisa_hook.hide_lisa_pandas_deprecation()
    _applied = True


def import_lisa(name: str = "lisa") -> types.ModuleType:
    """Import a LISA module (e.g. ``"lisa.trace"``) with the shims in place."""
    apply()
    return importlib.import_module(name)


def quiet_lisa_logs() -> None:
    """LISA and devlib log every step at INFO/WARNING; a campaign shows its own progress."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in ("lisa", "devlib", "LocalConnection", "LocalLinuxTarget", "Target"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # PlatformInfo logs an ERROR for every optional key a target lacks (nrg-model without
    # cpu_capacity on x86 boards): expected, and the energy model is read by lisa_ext itself
    logging.getLogger("lisa.platforms.platinfo.PlatformInfo").setLevel(logging.CRITICAL)
