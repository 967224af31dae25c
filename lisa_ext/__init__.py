"""lisa_ext: a research workbench for Linux scheduler and power-management patches.

The package is layered the way data flows, and no module imports from a layer
further up this chain::

    campaign (spec, runner, store)  ->  trace (ingest)  ->  analysis
        ->  stats  ->  report

The target layer (:mod:`lisa_ext.target`, :mod:`lisa_ext.knobs`,
:mod:`lisa_ext.running_kernel`, :mod:`lisa_ext.kernel`, :mod:`lisa_ext.vboard`)
sits below the campaign runner and never imports the runner, store, report or
study (only :mod:`lisa_ext.target` uses the YAML checks of
:mod:`lisa_ext.schema`);
:mod:`lisa_ext.workbench` says where the input directories are.

Importing :mod:`lisa_ext` itself is cheap and has no side effects. LISA is
imported plainly or through :func:`lisa_ext.compat.import_lisa`; either way
the numpy-2 compatibility shims come first (:mod:`lisa_ext.lisa_hook`).
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
