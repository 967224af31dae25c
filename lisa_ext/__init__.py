"""lisa_ext: a research workbench for Linux scheduler and power-management patches.

The package is layered the way data flows, and no module imports from a layer
further up this chain::

    campaign (spec, runner, store)  ->  trace (ingest)  ->  analysis
        ->  stats  ->  report

Importing :mod:`lisa_ext` itself is cheap and has no side effects. Modules that
need LISA import it through :func:`lisa_ext.compat.import_lisa`, which applies
the numpy-2 compatibility shims first.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
