"""Cover-letter tables rendered from a comparison frame (:func:`lisa_ext.stats.compare`).

Formats, each matching what kernel cover letters show:

``mmtests``
    mmtests' ``compare-kernels.sh`` text (``bin/lib/MMTests/Compare.pm`` and
    ``PrintGeneric.pm``): ``%-9s`` statistic name, metric name, then per
    variant ``%12.2f`` and `` (%7.2f%%)``; a significant change has its
    parentheses replaced by ``*``. % changes are sign-normalised (positive is
    better), as mmtests' ``pdiff``/``pndiff`` print them.
``markdown``
    the tables of the teo util-awareness RFC: ``value (±x.xx%)`` cells, raw %
    change, baseline ``(0.0%)``; significant cells in bold.
``lkp``
    0-day/LKP ``compare`` style: ``value ± stddev%`` per variant and the raw
    ``%change`` between them.
``sd``
    the workqueue RFC's ``mean ±sd`` table, variants as rows, with the % change
    of the first metric against the baseline in the last column.
``csv``
    every statistic and the p-value, for further processing.
``cover``, ``cover-html``, ``cover-text``
    the cover-letter table (:mod:`lisa_ext.report.cover`): mean ± sd, % change
    with its confidence interval, p-value, verdict and n per metric and variant.

All renderers are pure functions of the frame: the same frame gives the same
bytes. Names (workloads, variants, metrics, units) come from specs and runs: the text
formats show them on one line (:func:`lisa_ext.report.escape.one_line`), Markdown as
text (:func:`lisa_ext.report.escape.markdown`).
"""

from __future__ import annotations

import io
import math
from typing import Callable, Iterable

import pandas as pd

from lisa_ext.report import cover
from lisa_ext.report.escape import markdown, one_line
from lisa_ext.stats.cover import with_verdicts

__all__ = [
    "FORMATS",
    "render",
    "render_mmtests",
    "render_markdown",
    "render_lkp",
    "render_sd",
    "render_csv",
    "format_value",
    "format_pct",
]

#: mmtests pads statistic names to its longest summary name ("1st-qrtle")
MMTESTS_LABEL_WIDTH = 9
MMTESTS_VALUE_WIDTH = 12
TIME_UNITS = {"ns", "us", "μs", "µs", "ms", "s"}

BACKSLASH = "\\"
_MEAN_LABEL = {"amean": "Amean", "hmean": "Hmean", "gmean": "Gmean"}


def format_value(x: float) -> str:
    """Two decimals with trailing zeros dropped: 2716.40 -> 2716.4, 2795.00 -> 2795."""
    if x is None or not math.isfinite(x):
        return "n/a"
    text = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def format_pct(x: float, baseline: bool = False) -> str:
    """Signed two-decimal percentage without trailing zeros: +2.89%, -9.85%, +1.9%."""
    if baseline:
        return "0.0%"
    if x is None or not math.isfinite(x):
        return "n/a"
    text = f"{x:+.2f}".rstrip("0")
    if text.endswith("."):
        text += "0"
    return text + "%"


def _variants(cmp: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(cmp["variant"]))


def _workloads(cmp: pd.DataFrame) -> Iterable[tuple[str, pd.DataFrame]]:
    for workload in dict.fromkeys(cmp["workload"]):
        yield workload, cmp[cmp["workload"] == workload]


def _metrics(block: pd.DataFrame) -> list[tuple[str, str, bool, str]]:
    keys = block[["metric", "unit", "lower_is_better", "mean_kind"]].itertuples(index=False)
    return list(dict.fromkeys(tuple(k) for k in keys))


def _cells(block: pd.DataFrame) -> Callable[[str, str], dict | None]:
    """``cell_of(metric, variant)``: that row of ``block`` as a dict (the first one), or None.
    One pass over the block: scanning it for every cell cost a study's report seconds."""
    rows: dict[tuple[str, str], dict] = {}
    for row in block.to_dict("records"):
        rows.setdefault((row["metric"], row["variant"]), row)
    return lambda metric, variant: rows.get((metric, variant))


def _legend(cmp: pd.DataFrame, significant: str, too_few: str) -> list[str]:
    if cmp.empty:
        return []
    test, alpha = cmp["test"].iloc[0], float(cmp["alpha"].iloc[0])
    lines = [f"{significant}: significant change ({test} test, alpha={alpha:g})"]
    if cmp["too_few"].any():
        lines.append(f"{too_few}: fewer than 3 iterations, not tested")
    return lines


# --- mmtests ---------------------------------------------------------------

def _mmtests_pdiff(new: float, base: float, lower_is_better: bool) -> float:
    # mmtests' pdiff/pndiff, including their conventions for zeros
    if not (math.isfinite(new) and math.isfinite(base)):
        return math.nan
    if new == base:
        return 0.0
    if lower_is_better:
        if new == 0:
            return 100.0
        if base == 0:
            return -99.0
        return 100.0 - new * 100.0 / base
    if new == 0:
        return 0.0
    if base == 0:
        return 100.0
    return new * 100.0 / base - 100.0


def render_mmtests(cmp: pd.DataFrame, stats: Iterable[str] = ("min", "max", "mean", "stddev",
                                                               "coeffvar"),
                   legend: bool = True) -> str:
    """mmtests compare text; ``stats`` picks and orders the rows of each workload."""
    variants = _variants(cmp)
    out: list[str] = []
    for workload, block in _workloads(cmp):
        cell_of = _cells(block)
        metrics = _metrics(block)
        shown = {m[0]: one_line(m[0]) for m in metrics}
        metric_width = max(len(name) for name in shown.values())
        values = [f"{v:.2f}" for v in block[["mean", "min", "max", "stddev", "cv_pct"]]
                  .to_numpy().ravel() if math.isfinite(v)]
        value_width = max([MMTESTS_VALUE_WIDTH] + [len(v) for v in values])
        heads = [one_line(v) for v in variants]
        col_width = max([value_width + 11] + [len(v) for v in heads])
        value_width = col_width - 11
        label_width = max(MMTESTS_LABEL_WIDTH, *(len(_MEAN_LABEL[m[3]]) for m in metrics))
        out.append(one_line(workload))
        out.append(" " * (label_width + 1 + metric_width)
                   + "".join(f"{v:>{col_width}}" for v in heads))
        for stat in stats:
            for metric, _unit, lib, kind in metrics:
                label = {"min": "Min", "max": "Max", "mean": _MEAN_LABEL[kind],
                         "stddev": "Stddev", "coeffvar": "CoeffVar"}[stat]
                column = {"min": "min", "max": "max", "mean": "mean", "stddev": "stddev",
                          "coeffvar": "cv_pct"}[stat]
                # spread is always better smaller, whatever the metric's direction
                lower = lib if stat in ("min", "max", "mean") else True
                base = cell_of(metric, variants[0])
                line = f"{label:<{label_width}} {shown[metric]:<{metric_width}}"
                for variant in variants:
                    cell = cell_of(metric, variant)
                    if cell is None:
                        line += " " * col_width
                        continue
                    value = cell[column]
                    text = f"{value:{value_width}.2f}" if math.isfinite(value) else \
                        f"{'n/a':>{value_width}}"
                    pct = math.nan if base is None else _mmtests_pdiff(value, base[column], lower)
                    pct_text = f"{pct:7.2f}%" if math.isfinite(pct) else f"{'n/a':>8}"
                    opening, closing = "(", ")"
                    if stat == "mean" and not cell["is_baseline"]:
                        if cell["significant"]:
                            opening = closing = "*"
                        elif cell["too_few"]:
                            opening = closing = "?"
                    line += f"{text} {opening}{pct_text}{closing}"
                out.append(line.rstrip())
        out.append("")
    if legend:
        out.extend(_legend(cmp, "*", "?"))
    return "\n".join(out).rstrip("\n") + "\n"


# --- markdown --------------------------------------------------------------

def _markdown_label(metric: str, unit: str, kind: str) -> str:
    label = f"{kind} {markdown(metric)}"
    return label if not unit or unit in TIME_UNITS else f"{label} [{markdown(unit)}]"


def _markdown_table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    def line(cells):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
    return [line(rows[0]), line(["-" * w for w in widths])] + [line(r) for r in rows[1:]]


def render_markdown(cmp: pd.DataFrame, legend: bool = True) -> str:
    """One Markdown table per workload: rows are metrics, columns variants."""
    variants = _variants(cmp)
    out: list[str] = []
    for workload, block in _workloads(cmp):
        cell_of = _cells(block)
        rows = [["metric"] + [markdown(v) for v in variants]]
        for metric, unit, _lib, kind in _metrics(block):
            row = [_markdown_label(metric, unit, kind)]
            for variant in variants:
                cell = cell_of(metric, variant)
                if cell is None:
                    row.append("")
                    continue
                value = format_value(cell["mean"]) + (unit if unit in TIME_UNITS else "")
                text = f"{value} ({format_pct(cell['pct_change'], cell['is_baseline'])})"
                if cell["significant"]:
                    text = f"**{text}**"
                elif cell["too_few"] and not cell["is_baseline"]:
                    text += " ?"
                row.append(text)
            rows.append(row)
        out.append(f"### {markdown(workload)}")
        out.append("")
        out.extend(_markdown_table(rows))
        out.append("")
    if legend:
        out.extend(line + "  " for line in _legend(cmp, "**bold**", "?"))
    return "\n".join(out).rstrip() + "\n"


# --- LKP -------------------------------------------------------------------

def _lkp_number(x: float) -> str:
    if not math.isfinite(x):
        return "n/a"
    if abs(x) >= 1e9:
        return f"{x:.3e}"
    if abs(x) >= 1000:
        return f"{x:.0f}"
    return f"{x:.2f}"


def _lkp_stddev(cell: dict) -> str:
    cv = cell["cv_pct"]
    return f"±{cv:3.0f}%" if math.isfinite(cv) else " " * 5


def render_lkp(cmp: pd.DataFrame) -> str:
    """LKP ``compare`` layout: ``value ±sd%`` per variant, ``%change`` in between."""
    variants = _variants(cmp)
    value_w, change_w = 10, 10
    col = value_w + 6
    heads = [one_line(v) for v in variants]
    head = [f"{heads[0]:>{col}}"] + [f"{' ' * change_w} {v:>{col}}" for v in heads[1:]]
    lines = ["".join(head).rstrip(),
             "-" * col + "".join(" " + "-" * (change_w + col) for _ in variants[1:]),
             f"{'%stddev':>{col}}" + "".join(f"{'%change':>{change_w}} {'%stddev':>{col}}"
                                             for _ in variants[1:]),
             BACKSLASH.rjust(col - 3) + "   " + "".join(
                 "|".rjust(change_w - 3) + "   " + BACKSLASH.rjust(col - 3) + "   "
                 for _ in variants[1:])]
    lines[-1] = lines[-1].rstrip()
    for workload, block in _workloads(cmp):
        cell_of = _cells(block)
        for metric, _unit, _lib, _kind in _metrics(block):
            parts = []
            for i, variant in enumerate(variants):
                cell = cell_of(metric, variant)
                if i:
                    change = "" if cell is None or not math.isfinite(cell["pct_change"]) else \
                        f"{cell['pct_change']:+.1f}%"
                    parts.append(f"{change:>{change_w}} ")
                parts.append(" " * col if cell is None else
                             f"{_lkp_number(cell['mean']):>{value_w}} {_lkp_stddev(cell)}")
            lines.append("".join(parts) + f"  {one_line(workload)}.{one_line(metric)}")
    return "\n".join(lines) + "\n"


# --- mean ± sd -------------------------------------------------------------

def render_sd(cmp: pd.DataFrame) -> str:
    """The workqueue RFC's table: variants as rows, ``mean ±sd`` per metric."""
    variants = _variants(cmp)
    out: list[str] = []
    for workload, block in _workloads(cmp):
        cell_of = _cells(block)
        metrics = _metrics(block)
        first = metrics[0][0]
        header = [one_line(workload)] + [one_line(f"{m} ({u})" if u else m) for m, u, _l, _k in metrics] + \
            [one_line(f"vs. {variants[0]} {first} (%)")]
        rows = [header]
        for variant in variants:
            row = [one_line(variant)]
            for metric, *_ in metrics:
                cell = cell_of(metric, variant)
                if cell is None:
                    row.append("")
                    continue
                sd = f" ±{cell['stddev']:.2f}" if math.isfinite(cell["stddev"]) else ""
                row.append(f"{cell['mean']:.2f}{sd}")
            cell = cell_of(first, variant)
            if cell is None or not math.isfinite(cell["pct_change"]):
                row.append("")
            elif cell["is_baseline"]:
                row.append("0.00")
            else:
                row.append(f"{cell['pct_change']:+.2f}")
            rows.append(row)
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        for i, row in enumerate(rows):
            out.append("  ".join([row[0].ljust(widths[0])] +
                                 [c.rjust(w) for c, w in zip(row[1:], widths[1:])]).rstrip())
            if i == 0:
                out.append("-" * len(out[-1]))
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


# --- CSV -------------------------------------------------------------------

def render_csv(cmp: pd.DataFrame) -> str:
    """Every column of the comparison, floats as ``%.10g``, ``\\n`` line ends."""
    buf = io.StringIO()
    cmp.to_csv(buf, index=False, float_format="%.10g", lineterminator="\n")
    return buf.getvalue()


#: format name -> renderer(comparison) -> text
FORMATS: dict[str, Callable[[pd.DataFrame], str]] = {
    "mmtests": render_mmtests,
    "markdown": render_markdown,
    "lkp": render_lkp,
    "sd": render_sd,
    "csv": render_csv,
}


def render(cmp: pd.DataFrame, fmt: str) -> str:
    if fmt in cover.FORMATS:
        return cover.render_cover(with_verdicts(cmp), fmt)
    try:
        return FORMATS[fmt](cmp)
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; expected one of "
                         f"{', '.join([*FORMATS, *cover.FORMATS])}") from None
