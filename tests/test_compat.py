"""Each compat shim is checked by running the LISA code path it repairs."""

import os
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
    # once the start-up import hook (lisa_ext.lisa_hook) is switched off
    plain = subprocess.run([sys.executable, "-c", "import lisa.analysis.tasks"],
                           capture_output=True, text=True, env=_env(LISA_EXT_NO_LISA_HOOK="1"))
    assert plain.returncode != 0 and "NaN" in plain.stderr
    fixed = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        from lisa_ext import compat
        compat.import_lisa('lisa.analysis.tasks')
    """)], capture_output=True, text=True, env=_env(LISA_EXT_NO_LISA_HOOK="1"))
    assert fixed.returncode == 0, fixed.stderr


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LISA_EXT_NO_LISA_HOOK"}
    env.update(extra)
    return env


def test_plain_lisa_import_works_in_the_venv():
    # the .pth installed with the package (setup.py) hooks LISA's first import;
    # the user's first notebook cell needs nothing from lisa_ext
    code = "from lisa.trace import Trace; import lisa.analysis.tasks; print(Trace.__name__)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_env(), cwd=os.path.dirname(__file__))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "Trace"


def test_program_that_never_imports_lisa_loads_nothing_of_it():
    code = ("import sys; import lisa_ext.lisa_hook as h; "
            "print(h.installed(), sorted(m for m in sys.modules if m == 'lisa' or m.startswith(('lisa.', 'numpy'))))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env())
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "True []"


def test_trace_from_our_loader_has_our_analyses_without_importing_them():
    sample = os.path.join(os.path.dirname(__file__), os.pardir, "data", "samples", "wq-affinity",
                          "runs", "cache", "fio-randread", "0", "trace.dat")
    code = textwrap.dedent(f"""
        import sys
        from lisa_ext.trace import load_trace
        trace = load_trace({os.path.abspath(sample)!r})
        print(trace.ana.wq_placement.df_placement_matrix.__name__,
              trace.ana.idle_miss.df_idle_miss_counts.__name__)
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env())
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["df_placement_matrix", "df_idle_miss_counts"]


def test_plain_lisa_import_works_in_the_jupyter_kernel():
    # a kernel engineer's first notebook cell, in the kernel the project's venv registers
    import nbclient
    import nbformat

    cell = ("from lisa.trace import Trace\n"
            "import lisa.analysis.tasks\n"
            "print(Trace.__name__)")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)])
    nbclient.NotebookClient(nb, kernel_name="python3", timeout=300).execute()
    stdout = [o.get("text") for o in nb.cells[0].outputs if o.get("name") == "stdout"]
    assert stdout == ["Trace\n"]
