"""Each compat shim is checked by running the LISA code path it repairs."""

import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pandas as pd

from lisa_ext import compat


def test_tasks_module_imports_with_np_nan_default():
    # lisa/analysis/tasks.py evaluates np.NaN in a default argument at import time
    import inspect

    tasks = compat.import_lisa("lisa.analysis.tasks")
    params = inspect.signature(tasks.TasksAnalysis.df_task_activation).parameters
    assert np.isnan(params["preempted_value"].default)


def test_series_integrate_uses_trapz():
    # lisa/datautils.py series_integrate(method='trapz') calls np.trapz
    datautils = compat.import_lisa("lisa.datautils")
    series = pd.Series([0.0, 1.0, 2.0], index=[0.0, 1.0, 2.0])
    assert datautils.series_integrate(series, method="trapz") == 2.0


def test_monad_imports_nest_asyncio():
    # lisa/monad.py imports the undeclared nest_asyncio: declared by lisa_ext
    compat.import_lisa("lisa.monad")


def test_lisa_deprecation_warnings_do_not_raise():
    compat.apply()
    with warnings.catch_warnings(record=True):
        # the filter left in place by lisa/__init__.py must not turn this into an error
        warnings.warn_explicit("old API", DeprecationWarning, "x.py", 1, module="lisa.trace")


def test_fresh_interpreter_without_compat_fails_then_works_with_it():
    # proves the shims are needed: plain LISA import of tasks.py fails on numpy 2
    plain = subprocess.run([sys.executable, "-c", "import lisa.analysis.tasks"],
                           capture_output=True, text=True)
    assert plain.returncode != 0 and "NaN" in plain.stderr
    fixed = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        from lisa_ext import compat
        compat.import_lisa('lisa.analysis.tasks')
    """)], capture_output=True, text=True)
    assert fixed.returncode == 0, fixed.stderr
