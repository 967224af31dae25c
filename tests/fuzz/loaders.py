"""What the loader fuzzer and its seeded test run on each damaged file, and what counts as a bug.

A campaign spec is loaded as ``lisa-ext run`` loads it: :func:`~lisa_ext.campaign.spec.load_spec`
(with ``smoke=True`` when the recipe says ``--smoke``), referenced files checked, then its target
config (:attr:`~lisa_ext.campaign.spec.CampaignSpec.target_config`); a target config through
:meth:`~lisa_ext.target.config.TargetConfig.load`. A loaded spec or config, or one
:class:`UserError` line that names a file, are the two acceptable outcomes; anything else raised
is a bug (:class:`Finding`), and so is a message spanning lines, holding a control character or
naming no file.

Each case is written into a scratch tree laid out like the repository (``notebooks/``,
``campaigns/``, ``targets/``; ``target-configs`` and ``kernels`` link to the repository's), so the
relative paths of a spec (``../target-configs/vboard.yml``, ``../kernels/...``) resolve as in
the checkout and nothing is written into it.
"""

from __future__ import annotations

import itertools
import os
import random
import resource
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Iterator

from loader_mutations import REPO, Case, Seed, load_seeds, mutate

from lisa_ext.campaign.spec import load_spec
from lisa_ext.compat import import_lisa
from lisa_ext.errors import UserError
from lisa_ext.target.config import TargetConfig

__all__ = ["CASE_MEMORY_MB", "CASE_SECONDS", "Finding", "Scratch", "load_any", "preload", "replay", "seeded_run"]

#: the most one case may take: the loaders answer in milliseconds
CASE_SECONDS = 10
#: the most address space one case may add to the process
CASE_MEMORY_MB = 1024


class Finding(AssertionError):
    """A loader misbehaved on a damaged file."""


class Scratch:
    """The scratch tree cases are written into (tmpfs when there is one)."""

    def __init__(self, root: str | None = None):
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.root = Path(root or tempfile.mkdtemp(prefix="fuzz-loaders-", dir=base))
        for name in ("notebooks", "campaigns", "targets"):
            (self.root / name).mkdir(exist_ok=True)
        for name in ("target-configs", "kernels"):
            if not (self.root / name).exists():
                (self.root / name).symlink_to(REPO / name)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def write(self, case: Case) -> Path:
        folder = "targets" if case.seed.kind == "target" else Path(case.seed.relative).parent.name
        path = self.root / folder / "case.yml"
        path.write_bytes(case.data)
        return path


def preload() -> None:
    """Import what the first target config would (LISA takes seconds), so that a case's time is its own."""
    import_lisa("lisa.target")
    import_lisa("lisa.platforms.platinfo")


def _check_message(exc: UserError) -> str:
    message = str(exc)
    if not message or not message.isprintable():
        raise Finding(f"{type(exc).__name__} message is empty or not one printable line: {message!r}") from exc
    named = message.split(": ", 1)[0]
    if named != "<input>" and not os.path.exists(named):
        raise Finding(f"{type(exc).__name__} names no file: {message!r}") from exc
    return message


def load_any(case: Case, path: Path) -> dict:
    """``{"loaded": name}`` or ``{"error": message}``; raises :class:`Finding` on a bug."""
    try:
        if case.seed.kind == "target":
            return {"loaded": TargetConfig.load(path).kind}
        spec = load_spec(path, smoke=case.smoke)
        return {"loaded": f"{spec.name} on {spec.target_config.kind}"}
    except UserError as exc:
        return {"error": _check_message(exc)}
    except (MemoryError, RecursionError) as exc:
        raise Finding(f"{type(exc).__name__} (a loader past its bounds)") from exc


def _overtime(signum, frame):
    raise Finding(f"over {CASE_SECONDS} s")


def _recipe(rng: random.Random) -> bytes:
    """A random recipe, mostly of one to three operations: a file with many problems stops at
    the first, so few operations reach deeper into the loaders."""
    flags = rng.choice((0, 1, 1, 1, 2, 2, 3, 6, 15)) << 4 | rng.choice((0, 0, 0, 1, 1, 2, 7)) | rng.choice((0, 8))
    return bytes([rng.randrange(256), flags, *(rng.randrange(256) for _ in range(rng.randrange(0, 96)))])


def _bounded(cases: Iterator[tuple[str, Case]]) -> Iterator[dict]:
    """Each ``(label, case)`` loaded within :data:`CASE_SECONDS` and :data:`CASE_MEMORY_MB` more
    address space (beyond either, or on a bug, the case is a ``{"bug": ...}``). Meant for a
    process of its own: it limits the address space of the whole process."""
    preload()
    scratch = Scratch()
    with open("/proc/self/statm") as statm:
        address_space = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (address_space + (CASE_MEMORY_MB << 20), resource.RLIM_INFINITY))
    signal.signal(signal.SIGALRM, _overtime)
    try:
        yield from _each(cases, scratch)
    finally:
        scratch.remove()


def _each(cases: Iterator[tuple[str, Case]], scratch: Scratch) -> Iterator[dict]:
    for label, case in cases:
        path = scratch.write(case)
        started = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
        try:
            outcome = load_any(case, path)
        except Exception as exc:  # a Finding, or any other exception: a bug; keep going
            outcome = {"bug": f"{type(exc).__name__}: {exc}"[:500]}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        yield {"case": label, "seed": case.seed.relative, "smoke": case.smoke, "size": len(case.data),
               "seconds": round(time.perf_counter() - started, 4),
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, **outcome}


def seeded_run(count: int, seed: int) -> Iterator[dict]:
    """``count`` random recipes from ``seed``, loaded as :func:`_bounded` says: the seeded test."""
    seeds, rng = load_seeds(), random.Random(seed)

    def cases() -> Iterator[tuple[str, Case]]:
        for _ in range(count):
            recipe = _recipe(rng)
            yield recipe.hex(), mutate(recipe, seeds)

    return _bounded(cases())


def replay(entries: list[str], texts: dict[str, str] | None = None) -> Iterator[dict]:
    """The recipes in the files ``entries`` (the regression corpus), then hand-written campaign
    specs ``{name: text}`` (each loaded with --smoke from ``notebooks/``), loaded as
    :func:`_bounded` says."""
    seeds = load_seeds()
    recipes = ((Path(entry).name, mutate(Path(entry).read_bytes(), seeds)) for entry in entries)
    written = ((name, Case(Seed("spec", f"notebooks/{name}.yml", text.encode()), text.encode(), True))
               for name, text in (texts or {}).items())
    return _bounded(itertools.chain(recipes, written))
