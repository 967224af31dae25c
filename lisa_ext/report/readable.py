"""Tables and names for a reader: metric names spelled out, numbers without scientific notation.

A page quotes frames whose columns are identifiers (``meter_power_mw``, ``restart_mhz_median``)
and whose index is a bare 0..n-1; :func:`readable_table` gives the same frame with its columns
named for a reader, the identifying columns as its index, numbers as a reader reads them.
:func:`metric_label` is the naming rule (a study's own labels first), :func:`format_number`
the number rule (3-4 significant digits, thousands separated, never ``1.4e+06``),
:func:`page_styler` the page rule: every text of a table HTML-escaped.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from lisa_ext.report import escape

__all__ = ["EMPTY", "decimals_of", "format_number", "knobs_table", "metric_label", "page_styler", "readable_table",
           "time_scale"]

#: how an empty cell prints: never "nan"
EMPTY = "–"

_UNITS = {"us": "µs", "μs": "µs", "mw": "mW", "mibps": "MiB/s", "khz": "kHz", "mhz": "MHz"}
_WORDS = {"lat": "latency", "bw": "bandwidth", "iops": "IOPS", "tps": "TPS", "util": "utilisation",
          "avg": "mean", "wakeup": "wake-up", "wu": "wake-up", "perf": "performance", "stddev": "sd", "cpu": "CPU", "freq": "frequency"}
#: a table of a page holds no math: MathJax (Jupyter, nbconvert) leaves elements of these classes
#: alone, so a ``$`` in a name from a run stays a dollar
_NO_MATH = 'class="tex2jax_ignore mathjax_ignore"'
#: identifier tokens that name a unit: ``sleep_ms_median`` -> "sleep median (ms)"
_UNIT_TOKENS = {"pct": "%", "ms": "ms", "us": "µs", "ns": "ns", "s": "s", "mhz": "MHz", "khz": "kHz",
                "mw": "mW", "w": "W", "mibps": "MiB/s", "kib": "KiB", "mib": "MiB"}
#: time units a figure's axis grows through, each with its length in µs
_TIME_UNITS = (("ns", 1e-3), ("µs", 1.0), ("ms", 1e3), ("s", 1e6))
#: how a run or a spec may spell a time unit -> the reader's spelling
_TIME_SPELLINGS = {"ns": "ns", "us": "µs", "µs": "µs", "μs": "µs", "ms": "ms", "s": "s"}
#: an axis's largest value in its unit stays below this: its ticks have at most 5 digits (the page
#: check's "unreadable number"), 200000 µs reads as 200 ms
_AXIS_LIMIT = 10_000


def time_scale(values: Iterable[float], unit: str) -> tuple[float, str]:
    """How a figure shows ``values`` measured in ``unit``: ``(factor, unit)``, values times
    ``factor`` in the returned unit, the first of ns, µs, ms, s from ``unit`` on in which the
    largest finite magnitude stays below 10,000 (ticks of at most 5 digits). The unit is spelt for
    a reader (``us`` -> ``µs``); a unit that is not a time comes back as it is, with factor 1."""
    spelt = _TIME_SPELLINGS.get(str(unit).strip())
    if spelt is None:
        return 1.0, unit
    array = pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce").to_numpy(float)
    finite = np.abs(array[np.isfinite(array)])
    top = float(finite.max()) if finite.size else 0.0
    at = [name for name, _ in _TIME_UNITS].index(spelt)
    start = _TIME_UNITS[at][1]
    while at + 1 < len(_TIME_UNITS) and top * start / _TIME_UNITS[at][1] >= _AXIS_LIMIT:
        at += 1
    return start / _TIME_UNITS[at][1], _TIME_UNITS[at][0]


def metric_label(metric: str, unit: str = "", labels: Mapping[str, str] | None = None) -> str:
    """A metric's name for a reader: ``labels[metric]`` when given, else its identifier
    spelled out (underscores to spaces, common abbreviations expanded, a ``trace`` prefix
    moved to the end), with its unit in parentheses."""
    unit = _UNITS.get(str(unit).lower(), str(unit)) if unit else ""
    source = ""
    if labels and metric in labels:
        name = labels[metric]
    else:
        words = metric.split()
        if words and words[0] == "trace":
            words, source = words[1:], "trace"
        parts = []
        # p99_9 is the 99.9th percentile, not p99 and 9
        words = [re.sub(r"(^|_)p(\d+)_(\d+)(?=_|$)", r"\1p\2.\3", w) for w in words]
        for word in (w for token in words for w in token.split("_")):
            if word.lower() in _UNIT_TOKENS and (parts or len(words) > 1):
                unit = unit or _UNIT_TOKENS[word.lower()]
            else:
                parts.append(_WORDS.get(word.lower(), word))
        name = " ".join(p for p in parts if p).removesuffix(" per")
        if unit and unit.startswith(f"{name}/"):  # records_per_s [records/s]
            name, unit = unit, ""
        if name.endswith(" %"):
            name, unit = name[:-2], unit or "%"
        name = name.replace(" % ", " (%) ")
    if unit and (f"({unit})" in name or name.split()[-1:] == [unit]):
        unit = ""
    inside = ", ".join(x for x in (source, unit) if x)
    if inside and re.search(r"\([^()]*\)$", name):
        # "energy (board model)" in J: one pair of parentheses, "energy (board model, J)"
        return f"{name[:-1]}, {inside})"
    return f"{name} ({inside})" if inside else name


def decimals_of(x: float) -> int:
    """Decimal places :func:`format_number` prints ``x`` with."""
    a = abs(x)
    if a >= 100:
        return 0
    if a >= 10:
        return 1
    if a >= 1 or a == 0:
        return 2
    return max(0, 2 - math.floor(math.log10(a)))


def format_number(x: float, decimals: int | None = None) -> str:
    """A value as a reader reads it: 3-4 significant digits (or ``decimals``), thousands
    separated, never scientific notation below a billion: 2,622; 924; 12.3; 0.0123. A count (an
    integer type) has no decimals: 2 runs, not 2.00."""
    if isinstance(x, numbers.Integral) and not isinstance(x, bool) and abs(x) < 1e9:
        return f"{x:,}"
    if x is None or not math.isfinite(x):
        return EMPTY if x is None or math.isnan(x) else ("∞" if x > 0 else "-∞")
    if abs(x) >= 1e9:
        return f"{x:.3g}"
    places = decimals_of(x) if decimals is None else decimals
    text = f"{x:,.{places}f}"
    return "0" if text in ("-0", "0.00", "-0.00") and x == 0 else text


def readable_table(frame: pd.DataFrame, labels: Mapping[str, str] | None = None,
                   index: Sequence[str] | None = None, units: Mapping[str, str] | None = None,
                   rename_rows: bool = False):
    """``frame`` styled for a page: columns (and index levels) renamed by ``labels`` or
    :func:`metric_label` (``units``: column -> unit, else a ``pct`` / ``ms`` / ``mhz``
    ... word of the name, or a trailing `` [unit]``, gives it), ``index`` columns moved to the
    index (a bare 0..n-1 index is hidden), with ``rename_rows`` the index's labels renamed
    alike (a transposed table of metrics), numbers by :func:`format_number`, empty cells as
    :data:`EMPTY`."""
    df = frame.copy()
    if index:
        df = df.set_index(list(index))
    elif isinstance(df.index, pd.RangeIndex):
        df = df.reset_index(drop=True)
    units = dict(units or {})

    def name(column) -> str:
        if isinstance(column, tuple):
            return " ".join(name(c) for c in column if str(c))
        column = str(column)
        if labels and column in labels:
            return labels[column]
        bracketed = re.match(r"^(.*\S)\s*\[([^\]]+)\]$", column)
        if bracketed and column not in units:
            return metric_label(bracketed.group(1), bracketed.group(2), labels)
        return metric_label(column, units.get(column, ""))

    if isinstance(df.columns, pd.MultiIndex):  # levels of values (variant, iteration): names only
        df.columns = df.columns.set_names([None if n is None else name(n) for n in df.columns.names])
    else:
        df.columns = [name(c) for c in df.columns]
    df.index = df.index.set_names([None if n is None else name(n) for n in df.index.names])
    if rename_rows:
        df.index = df.index.map(lambda label: name(label) if isinstance(label, str) else label)
    styler = page_styler(df, lambda v: format_number(v) if isinstance(v, (int, float)) and not
                         isinstance(v, bool) else str(v))
    if isinstance(frame.index, pd.RangeIndex) and not index:
        styler = styler.hide(axis="index")
    return styler


def knobs_table(read_back: Iterable[tuple[str, str, str]]):
    """The knobs read back, for a page, from (variant, knob path, value) per run and knob: one row
    per variant and path (a cpufreq policy's, a module's knob named by its whole path, so two
    ``timing`` parameters stay apart), each value read back once (``a; b`` when runs differ)."""
    values: dict[tuple[str, str], list[str]] = {}
    for variant, path, value in read_back:
        seen = values.setdefault((str(variant), str(path)), [])
        if str(value) not in seen:
            seen.append(str(value))
    frame = pd.DataFrame([{"Variant": variant, "Knob": path, "Read back": "; ".join(found)}
                          for (variant, path), found in values.items()], columns=["Variant", "Knob", "Read back"])
    # paths in cells, not row headers: they are the target's names, not identifiers to spell out
    return page_styler(frame, str).hide(axis="index")


def page_styler(frame: pd.DataFrame, cell: Callable[[Any], str], *, na_rep: str = EMPTY,
                caption: str | None = None):
    """``frame`` styled for a page: each cell shown as ``cell(value)`` (an empty one as
    ``na_rep``) and every text of the table, cells, row and column labels, axis names and
    ``caption``, HTML-escaped (:func:`lisa_ext.report.escape.html`; labels by pandas' own
    ``escape="html"``, which keeps numbers as pandas shows them): names and values come from
    runs, targets and specs, and are never markup."""
    def names(axis: pd.Index) -> list:
        return [None if n is None else escape.html(n) for n in axis.names]

    df = frame.rename_axis(index=names(frame.index), columns=names(frame.columns))
    styler = df.style.format(lambda v: escape.html(cell(v)), na_rep=na_rep)
    styler = styler.format_index(escape="html", axis="index").format_index(escape="html", axis="columns")
    styler = styler.set_table_attributes(_NO_MATH)
    return styler if caption is None else styler.set_caption(escape.html(caption))
