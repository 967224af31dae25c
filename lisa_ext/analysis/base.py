"""What every lisa-ext analysis offers besides LISA's ``df_*`` / ``plot_*`` methods.

An analysis is one :class:`StudyAnalysis` subclass (itself a LISA
:class:`~lisa.analysis.base.TraceAnalysisBase`, so ``trace.ana.<name>``) in its
own module, listed once in :data:`lisa_ext.analysis.registry.ANALYSIS_CLASSES`. The
``lisa-ext analyse`` command, the campaign report and the notebooks loop over
that list; nothing else names the analyses. A class declares:

``name``
    LISA's snake_case name: ``trace.ana.<name>``.
``cli_name``
    the hyphenated name of ``lisa-ext analyse NAME``.
``EVENTS`` / ``ANY_OF_EVENTS``
    what its per-run figures need: every event of ``EVENTS`` and, when not
    empty, at least one of ``ANY_OF_EVENTS``. The ``df_*`` methods keep LISA's
    ``@requires_events`` for their own needs.
:meth:`StudyAnalysis.add_cli_arguments`
    its own ``lisa-ext analyse`` options (an argument group).
:meth:`StudyAnalysis.summary`
    the JSON-ready figures ``lisa-ext analyse NAME TRACE --json`` prints;
    :meth:`StudyAnalysis.summary_tables` the same for people.
:meth:`StudyAnalysis.run_metrics` / :meth:`StudyAnalysis.run_frames`
    the per-run figures and frames the campaign report gathers (whole-trace
    figures, where :meth:`summary` is per task / CPU).
"""

from __future__ import annotations

import argparse
import math
from typing import Any, ClassVar, Iterable, NamedTuple, Sequence

import pandas as pd

from lisa_ext import compat
from lisa_ext.errors import UserError

TraceAnalysisBase = compat.import_lisa("lisa.analysis.base").TraceAnalysisBase

__all__ = ["RunMetric", "StudyAnalysis", "json_ready", "missing_events", "records", "window_seconds"]


class RunMetric(NamedTuple):
    """One per-run figure for the report's metrics table."""

    name: str
    value: float
    unit: str
    lower_is_better: bool


class StudyAnalysis(TraceAnalysisBase):
    """Base of lisa-ext's analyses (no ``name`` of its own, so LISA does not list it)."""

    cli_name: ClassVar[str]
    EVENTS: ClassVar[tuple[str, ...]] = ()
    ANY_OF_EVENTS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def add_cli_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """Add this analysis's options to ``lisa-ext analyse`` (none by default).

        The destinations added here are the keyword options :meth:`summary`
        and :meth:`summary_tables` receive.
        """

    def summary(self, **options: Any) -> dict[str, Any]:
        """JSON-ready figures: what ``lisa-ext analyse NAME TRACE --json`` prints."""
        raise NotImplementedError

    def summary_tables(self, **options: Any) -> list[tuple[str, pd.DataFrame]]:
        """(title, frame) pairs ``lisa-ext analyse NAME TRACE`` prints."""
        raise NotImplementedError

    def run_metrics(self) -> list[RunMetric]:
        """Whole-trace figures for the campaign report (none by default)."""
        return []

    def run_frames(self) -> dict[str, pd.DataFrame]:
        """Frames the report's figures draw (frame name -> data; none by default)."""
        return {}


def missing_events(events: Iterable[str], any_of: Sequence[str], available: set[str]) -> list[str]:
    """What lacks among ``available`` events for needing every one of ``events``
    and one of ``any_of`` (``"a or b"`` for the latter); empty when nothing."""
    lacking = [e for e in events if e not in available]
    if any_of and not available.intersection(any_of):
        lacking.append(" or ".join(any_of))
    return lacking


def window_seconds(name: str, window_ms: float) -> float:
    """A time window an analysis was given in milliseconds (``--window-ms``, ...), in seconds.
    Anything but a positive, finite duration is a UserError naming ``name``: a negative or NaN
    window would silently give figures over nothing."""
    if isinstance(window_ms, bool) or not isinstance(window_ms, (int, float)) \
            or not math.isfinite(window_ms) or window_ms <= 0:
        raise UserError(f"{name}: expected a positive number of milliseconds, got {window_ms!r}")
    return window_ms / 1e3


def records(df: pd.DataFrame, columns) -> dict[str, dict[str, Any]]:
    """``{str(index): {column: value}}`` of ``columns``: the JSON layout of the summaries."""
    return {str(k): row for k, row in df[list(columns)].to_dict(orient="index").items()}


def json_ready(value: Any) -> Any:
    """JSON-safe: NaN -> null, numpy scalars -> Python, keys -> str."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
