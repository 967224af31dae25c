"""The workbench: where lisa-ext finds its inputs and writes its outputs.

Inputs are the directories of the repository besides the package:
``notebooks/`` (studies: campaign spec + notebook), ``campaigns/``,
``kernels/`` (variant specs, patches, config fragments, the platform-emu
module sources) and ``target-configs/``. Outputs are ``data/`` (campaigns)
and ``out/`` (rendered notebooks). :func:`workbench_dir` is, first found:

1. ``$LISA_EXT_WORKBENCH`` (a checkout, or a copy of its input directories);
2. the checkout the package runs from (``make`` installs it editable);
3. the copy a regular ``pip install .`` puts in ``<prefix>/share/lisa-ext``
   (``setup.py`` ships the input directories as data files).

:func:`output_dir` is the workbench when it is writable on purpose (1. or 2.),
else the current directory: an installed copy is never written into.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from lisa_ext.errors import UserError

__all__ = ["ENV", "INPUT_DIRS", "cache_root", "campaign_dir", "ccache_env", "installed_workbench", "output_dir",
           "shown_path", "workbench_dir", "workbench_path"]

ENV = "LISA_EXT_WORKBENCH"
#: the workbench's input directories (shipped by setup.py in a regular install)
INPUT_DIRS = ("campaigns", "kernels", "notebooks", "target-configs")
#: where a regular install puts them, under sys.prefix
SHARE = Path("share") / "lisa-ext"


def _checkout() -> Path | None:
    # the one use of __file__: telling a checkout (editable install, PYTHONPATH)
    # from a regular install, where the package's parent is site-packages
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and (root / "notebooks").is_dir():
        return root
    return None


def installed_workbench() -> Path | None:
    """``<prefix>/share/lisa-ext`` of a regular install, when it exists."""
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        share = Path(prefix) / SHARE
        if (share / "notebooks").is_dir():
            return share
    return None


def workbench_dir() -> Path:
    """The directory holding ``notebooks/``, ``kernels/``, ``target-configs/``, ``campaigns/``."""
    explicit = os.environ.get(ENV)
    if explicit:
        root = Path(explicit).expanduser()
        if not root.is_dir():
            raise UserError(f"{ENV}={explicit}: no such directory")
        return root.resolve()
    found = _checkout() or installed_workbench()
    if found is None:
        raise UserError(f"no workbench found: set {ENV} to a lisa-ext checkout "
                        f"(the directory with notebooks/, kernels/, target-configs/)")
    return found


def workbench_path(*parts: str) -> Path:
    """A path inside :func:`workbench_dir`, e.g. ``workbench_path("kernels", "platform-emu")``."""
    return workbench_dir().joinpath(*parts)


def output_dir() -> Path:
    """Where ``data/`` and ``out/`` go by default: the workbench, unless it is
    an installed copy (then the current directory)."""
    explicit = os.environ.get(ENV)
    if explicit:
        return workbench_dir()
    return _checkout() or Path.cwd()


def campaign_dir(name: str) -> Path:
    """Where campaign ``name`` goes when no directory is given: ``data/<name>`` under
    :func:`output_dir`, for ``campaign run``, ``study run`` and the quickstart alike."""
    return output_dir() / "data" / name


def cache_root() -> Path:
    """Where lisa-ext keeps what it can rebuild, one subdirectory each (``kernels``, ``ccache``,
    ``vboard``, ``tools``, ``traces``, ``report``): ``$LISA_EXT_CACHE``, else ``~/.cache/lisa-ext``.
    The one reading of that variable."""
    env = os.environ.get("LISA_EXT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "lisa-ext"


def ccache_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the compiler cache every build of ours shares (the kernels', QEMU's):
    ``ccache`` in :func:`cache_root`, in depend mode. Depend mode takes an object's inputs from
    the dependency file the compiler writes anyway (``-MD``), where ccache's default runs the
    preprocessor a second time to look the object up: on an empty cache that made a kernel build
    take 1.5 times as long as without ccache, and depend mode 1.08 times
    (``bench/kernel_cold_build.py``), while a rebuild still finds every object. A variable the
    caller set is kept."""
    env = dict(env)
    env.setdefault("CCACHE_DIR", str(cache_root() / "ccache"))
    env.setdefault("CCACHE_MAXSIZE", "5G")
    env.setdefault("CCACHE_DEPEND", "1")
    return env


def shown_path(path: str | os.PathLike) -> str:
    """``path`` as a message shows it: relative to the current directory when inside it, so
    the command it is part of can be pasted as is."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
