"""Import hook that makes a plain ``import lisa`` work in the lisa-ext environment.

LISA 3.1.0 needs the shims of :mod:`lisa_ext.compat` on numpy 2, and a
``Trace`` only offers our analyses under ``trace.ana.<name>`` once the classes
of :mod:`lisa_ext.analysis.registry` exist. Rather than asking every notebook to go
through :func:`lisa_ext.compat.import_lisa`, the package installs
``lisa_ext_lisa_hook.pth`` in site-packages (see ``setup.py``); Python runs its
one line at start-up, which calls :func:`install`. That only puts a small
finder on :data:`sys.meta_path`; nothing else happens until a program imports
LISA:

* right before ``lisa`` executes: the numpy aliases of
  :func:`shim_numpy_aliases` and :func:`skip_iri_format_checker`;
* right after ``lisa`` executed: :func:`relax_lisa_warning_filter`;
* right after ``lisa.analysis._proxy`` executed (LISA's ``Trace.__init__``
  imports it to build ``trace.ana``): :func:`register_analyses` loads the modules
  installed packages declare under the entry-point group :data:`ANALYSES_GROUP`
  (lisa-ext's own, :mod:`lisa_ext.analysis.registry`, is declared in
  ``pyproject.toml``), which define :class:`~lisa.analysis.base.TraceAnalysisBase`
  subclasses, so every ``Trace`` - LISA's loader or
  :func:`lisa_ext.trace.load_trace` - has them. This module, at the bottom of the
  layers, names none of them: the analysis layer declares itself, and neither
  ingest (:mod:`lisa_ext.trace`) nor this hook imports it.

Set ``LISA_EXT_NO_LISA_HOOK=1`` to start an interpreter without the hook
(``tests/test_compat.py`` uses it to show the shims are still needed).
"""

from __future__ import annotations

# stdlib modules already loaded at start-up only (importlib.abc alone would pull
# importlib.resources, tempfile and typing: ~17 ms on every interpreter start)
import os
import sys
import warnings

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing

__all__ = ["ANALYSES_GROUP", "LisaShimFinder", "install", "install_at_startup", "installed",
           "register_analyses", "relax_lisa_warning_filter", "shim_numpy_aliases", "skip_iri_format_checker"]

if TYPE_CHECKING:
    from types import ModuleType
    from typing import Callable, Sequence

DISABLE_ENV = "LISA_EXT_NO_LISA_HOOK"
#: entry-point group of the modules defining LISA analyses (``trace.ana.<name>``) to register
ANALYSES_GROUP = "lisa_ext.trace_analyses"


def shim_numpy_aliases() -> None:
    """Restore ``np.NaN`` and ``np.trapz`` (see :mod:`lisa_ext.compat` for the LISA files needing them)."""
    # deferred: this module runs at every interpreter start-up (.pth), numpy costs ~0.5 s
    import numpy as np

    if not hasattr(np, "NaN"):
        np.NaN = np.nan  # type: ignore[attr-defined]
    if not hasattr(np, "trapz"):
        np.trapz = np.trapezoid  # type: ignore[attr-defined]


def skip_iri_format_checker() -> None:
    """Keep jsonschema from importing rfc3987_syntax, whose IRI grammar (a Lark parser) is
    built at import: 1.65 s on a quiet machine, paid by every process that imports LISA
    (``lisa.utils`` -> sphobjinv -> jsonschema) or papermill/nbconvert (nbformat ->
    jsonschema). It only serves jsonschema's optional "iri" formats, which neither
    LISA's nor any notebook schema uses; a process that imported it already keeps it."""
    sys.modules.setdefault("rfc3987_syntax", None)  # None in sys.modules: ImportError on import


def relax_lisa_warning_filter() -> None:
    """Downgrade LISA's error filter for its DeprecationWarnings to ``default``."""
    relaxed = []
    for action, message, category, module, lineno in warnings.filters:
        pattern = getattr(module, "pattern", module)
        if (
            action == "error"
            and category is DeprecationWarning
            and isinstance(pattern, str)
            and pattern.startswith("lisa")
        ):
            action = "default"
        relaxed.append((action, message, category, module, lineno))
    warnings.filters[:] = relaxed
    warnings._filters_mutated()  # type: ignore[attr-defined]


def _before_lisa(module: ModuleType) -> None:
    shim_numpy_aliases()
    skip_iri_format_checker()


def hide_lisa_pandas_deprecation() -> None:
    """Hide the one pandas deprecation LISA 3.1 trips on every frame it converts.

    ``lisa/datautils.py`` (``series_convert``) passes ``convert_dtype=False`` to
    ``Series.apply``: deprecated in pandas 2.1, with unchanged behaviour until
    pandas 3. The warning names LISA's line, not the user's, and nothing the user
    can do about it; it filled executed notebooks with dozens of lines per cell.
    Only that message from that module is hidden.
    """
    warnings.filterwarnings("ignore", message="the convert_dtype parameter is deprecated",
                            category=FutureWarning, module=r"lisa\.datautils")


def _after_lisa(module: ModuleType) -> None:
    relax_lisa_warning_filter()
    hide_lisa_pandas_deprecation()


def register_analyses() -> None:
    """Load every module declared under :data:`ANALYSES_GROUP`: defining the analysis classes
    is what registers them with LISA.

    A broken analysis module must not make every ``Trace`` unusable, so a
    failure becomes a warning naming it rather than an exception inside LISA.
    """
    # deferred: scanning the installed packages' metadata costs ~20 ms, paid by the first
    # trace.ana only (this module runs at every interpreter start-up)
    from importlib.metadata import entry_points

    declared = entry_points(group=ANALYSES_GROUP)
    if not declared:
        warnings.warn(f"lisa-ext analyses not registered on trace.ana: no package declares the "
                      f"entry-point group {ANALYSES_GROUP} (install lisa-ext: pip install -e .)",
                      RuntimeWarning, stacklevel=2)
    for entry in declared:
        try:
            entry.load()
        except Exception as exc:  # noqa: BLE001 - reported, see docstring
            warnings.warn(f"lisa-ext analyses not registered on trace.ana: {entry.value} failed to "
                          f"import: {type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)


def _after_proxy(module: ModuleType) -> None:
    register_analyses()


#: module name -> (before exec, after exec)
_HOOKS: dict[str, tuple[Callable[[ModuleType], None] | None, Callable[[ModuleType], None] | None]] = {
    "lisa": (_before_lisa, _after_lisa),
    "lisa.analysis._proxy": (None, _after_proxy),
}


class _WrappingLoader:
    """Runs the real loader, with our calls before and after the module executes."""

    def __init__(self, loader, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        before, after = _HOOKS[self._name]
        if before is not None:
            before(module)
        # keep introspection (inspect.getsource, importlib.resources) on the real loader
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        if after is not None:
            after(module)

    def __getattr__(self, name: str):
        return getattr(self._loader, name)


class LisaShimFinder:
    """Finds nothing itself: wraps the loader the other finders return for LISA."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target=None):
        if fullname not in _HOOKS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _WrappingLoader(spec.loader, fullname)
                return spec
        return None


def installed() -> bool:
    return any(isinstance(f, LisaShimFinder) for f in sys.meta_path)


def install() -> None:
    """Put the finder first on :data:`sys.meta_path` (once; a no-op when disabled).

    If LISA was imported before, apply now what the finder would have done.
    """
    if installed():
        return
    sys.meta_path.insert(0, LisaShimFinder())
    if "lisa" in sys.modules:
        _before_lisa(sys.modules["lisa"])
        _after_lisa(sys.modules["lisa"])
    if "lisa.analysis._proxy" in sys.modules:
        register_analyses()


def install_at_startup() -> None:
    """What ``lisa_ext_lisa_hook.pth`` runs: :func:`install` unless disabled."""
    if not os.environ.get(DISABLE_ENV):
        install()
