"""lisa_ext: a research workbench for Linux scheduler and power-management patches.

Data flows one way: campaign spec -> runner (target + variant + workload +
tracing) -> store (``data/``) -> ingest (trace.dat -> Arrow) -> analyses ->
statistics -> report -> studies and notebooks. The modules are layered so that
no import runs back up; ``.importlinter`` holds the contract and
``tests/test_layers.py`` checks it on every ``make test``. From the top (a
layer may import only the layers below it; ``|`` separates modules of one layer
that do not import each other)::

    cli                  # lisa_ext.cli and every lisa_ext.<package>.cli: the commands
    quickstart           # the quickstart study
    study | bisect       # running a study: campaign + report + notebook; bisecting a patch series
    studies              # per study: our numbers in its RFC's table shapes, its mechanism
    report               # tables, figures, explorer of a campaign
    stats                # comparisons of variants in a metrics table
    analysis             # the registered LISA analyses (trace.ana.<name>)
    campaign             # spec -> runner -> store; see lisa_ext.campaign
    kernel               # kernel variants: build and deploy
    target               # target configs, the target protocol and its implementations
    vboard               # the QEMU virtual board
    trace                # ingest: trace.dat / text / systrace -> Arrow tables
    devicetree | energy_model | knobs | rfc_numbers | running_kernel | ssh | staged_modules
    compat | schema | workbench
    lisa_hook            # makes a plain `import lisa` work; runs at start-up
    errors

Command modules sit on top although most live inside the package they drive
(``lisa_ext.stats.cli`` may use the report's table renderers, ``lisa_ext.vboard.cli``
the kernel deploy); only :mod:`lisa_ext.cli` imports them, lazily. Inside
:mod:`lisa_ext.campaign` the store is the bottom: ``cli > status > runner > recovery > session | spec >
sched_ext > cpu_util | host_load | meters | tools | tracing | workloads > health | remote | requirements | storage | trace_loss >
store``; the runner
writes the store (:mod:`lisa_ext.campaign.store.writer`), the report, stats and studies read it
through :mod:`lisa_ext.campaign.store.reader`. Inside :mod:`lisa_ext.trace`: ``cli > lisa_parser > read | strip >
cache | systrace | tracedat > bprint | perfetto | text | tracedat_format > cluster | tables``.

No module imports by name (``importlib.import_module``, ``'module:function'`` strings) across
these layers, and the import graph has no cycle (``tests/test_layers.py`` checks both). The one
registration by name is declared: :mod:`lisa_ext.analysis.registry` is the entry point
``lisa_ext.trace_analyses`` that :mod:`lisa_ext.lisa_hook` loads when LISA builds ``trace.ana``.
docs/architecture.md draws the whole house.

Importing :mod:`lisa_ext` itself is cheap and has no side effects. LISA is
imported plainly or through :func:`lisa_ext.compat.import_lisa`; either way
the numpy-2 compatibility shims come first (:mod:`lisa_ext.lisa_hook`).
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
