"""Kernel variants: specs, base trees, patch application and cached builds.

* :mod:`lisa_ext.kernel.spec` — load and validate ``kernels/<study>/<variant>.yml``
* :mod:`lisa_ext.kernel.tree` — base trees (Debian ``linux-source-6.12``, a directory, git)
* :mod:`lisa_ext.kernel.patches` — ``git am`` / ``patch -p1`` with failures naming the hunk
* :mod:`lisa_ext.kernel.config` — fragment requests vs the final ``.config``
* :mod:`lisa_ext.kernel.build` — :func:`~lisa_ext.kernel.build.build_variant` and its cache
* :mod:`lisa_ext.kernel.deploy` — put a built variant on a target (:class:`lisa_ext.target.Target`)
  and verify that it runs
* :mod:`lisa_ext.kernel.cli` — ``lisa-ext kernel check|build``
"""

__all__: list[str] = []
