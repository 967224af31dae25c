"""The cover-letter table (:func:`lisa_ext.stats.cover.cover_table`) as Markdown, HTML and text.

One row per metric and variant: mean ± sd (or the harmonic / geometric mean), the % change
against the baseline with its confidence interval, the test's p-value, the verdict and n.
Metrics are named for a reader: a study passes its own labels, and any other metric
name is spelled out by :func:`lisa_ext.report.readable.metric_label` (``wakeup_lat_p99``
[us] -> "wake-up latency p99 (µs)"). The text layout follows mmtests' ``compare-kernels.sh``: per metric a mean
row with ``(pct%)`` or ``*pct%*`` when significant, its % sign-normalised (positive is
better), then the spread, the change's interval, the p-value and n.

:class:`CoverLetterTable` holds one such table and shows as HTML in a notebook. Workload,
metric and variant names come from specs and runs: each format escapes them
(:mod:`lisa_ext.report.escape`).
"""

from __future__ import annotations

import math
from typing import Mapping

import pandas as pd

from lisa_ext.report import escape
from lisa_ext.report.readable import EMPTY, decimals_of, format_number, metric_label

__all__ = ["CoverLetterTable", "FORMATS", "render_cover"]

_TEST_NAMES = {"welch": "Welch's t", "mwu": "Mann-Whitney U", "ks": "Kolmogorov-Smirnov",
               "mmtests": "mmtests' rule"}
_MEAN_NAMES = {"amean": "", "hmean": "hmean", "gmean": "gmean"}


def _pct(x: float) -> str:
    if not math.isfinite(x):
        return EMPTY
    text = f"{x:+.1f}" if abs(x) < 100 else f"{x:+.0f}"
    return f"{'0.0' if text in ('+0.0', '-0.0') else text} %"


def _ci(low: float, high: float, too_few: bool) -> str:
    if math.isnan(low) or math.isnan(high):
        return EMPTY
    if math.isinf(low) or math.isinf(high):
        # Fieller's interval is unbounded when the baseline's mean is within its noise of zero
        return f"unbounded: {'too few runs' if too_few else 'the baseline too noisy'}"
    return f"{_pct(low)[:-2]} … {_pct(high)}"


def _p(p: float) -> str:
    if not math.isfinite(p):
        return EMPTY
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _mean(row: dict, tagged: bool = True) -> str:
    value = format_number(row["mean"])
    sd = row["stddev"]
    decimals = decimals_of(row["mean"]) if math.isfinite(row["mean"]) else None
    if math.isfinite(sd) and decimals is not None and round(sd, decimals) == 0:
        decimals = None  # a spread below the mean's last digit keeps its own digits
    spread = f" ± {format_number(sd, decimals)}" if row["mean_kind"] != "gmean" and math.isfinite(sd) else ""
    kind = _MEAN_NAMES[row["mean_kind"]]
    return f"{value}{spread}" + (f" ({kind})" if kind and tagged else "")


def _rows(table: pd.DataFrame, labels: Mapping[str, str] | None, tagged: bool = True) -> list[dict]:
    rows = []
    for row in table.to_dict("records"):
        baseline = row["is_baseline"]
        rows.append({
            "workload": row["workload"],
            "metric": metric_label(row["metric"], row["unit"], labels),
            "variant": row["variant"],
            "mean": _mean(row, tagged),
            "change": EMPTY if baseline else _pct(row["pct_change"]),
            "ci": EMPTY if baseline else _ci(row["pct_ci_low"], row["pct_ci_high"], bool(row["too_few"])),
            "p": EMPTY if baseline else _p(row["p_value"]),
            "verdict": row["verdict"],
            "n": str(row["n"]),
        })
    return rows


def _headers(table: pd.DataFrame) -> list[str]:
    baseline = table.loc[table["is_baseline"], "variant"]
    base = baseline.iloc[0] if len(baseline) else "baseline"
    confidence = float(table["confidence"].iloc[0]) if len(table) else 0.95
    test = _TEST_NAMES.get(str(table["test"].iloc[0]), str(table["test"].iloc[0])) if len(table) else "t"
    return ["Workload", "Metric", "Variant", "Mean ± sd", f"Change vs {base}",
            f"{confidence * 100:g} % CI of the change", f"p ({test})", "Verdict", "n"]


def _legend(table: pd.DataFrame) -> str:
    if table.empty:
        return ""
    alpha = float(table["alpha"].iloc[0])
    test = _TEST_NAMES.get(str(table["test"].iloc[0]), str(table["test"].iloc[0]))
    return (f"Better / worse: {test} test significant at {alpha:g} with at least 3 runs a side, in the "
            "metric's own direction. The interval is of the ratio of the two means (Fieller's; of the "
            "logs for a gmean), both sides' noise counted.")


def _blank_repeats(rows: list[dict]) -> list[dict]:
    out, previous = [], (None, None)
    for row in rows:
        shown = dict(row)
        if (row["workload"], row["metric"]) == previous:
            shown["workload"] = shown["metric"] = ""
        elif row["workload"] == previous[0]:
            shown["workload"] = ""
        previous = (row["workload"], row["metric"])
        out.append(shown)
    return out


_KEYS = ["workload", "metric", "variant", "mean", "change", "ci", "p", "verdict", "n"]
#: the cells naming what was measured, from specs and runs; the others are numbers and words of ours
_NAMED = {"workload", "metric", "variant"}


def render_cover_markdown(table: pd.DataFrame, labels: Mapping[str, str] | None = None) -> str:
    """One Markdown table, the workload and metric written once per group; the legend under it."""
    lines = ["| " + " | ".join(escape.markdown(h) for h in _headers(table)) + " |", "|" + "---|" * len(_KEYS)]
    for row in _blank_repeats(_rows(table, labels)):
        cells = [escape.markdown(row[k]) if k in _NAMED else row[k] for k in _KEYS]
        if row["verdict"] in ("better", "worse"):
            cells[4:6] = [f"**{c}**" for c in cells[4:6]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + _legend(table) + "\n"


_STYLE = ("<style>.lisa-cover{border-collapse:collapse;font-size:13px}"
          ".lisa-cover th,.lisa-cover td{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}"
          ".lisa-cover td.l,.lisa-cover th.l{text-align:left}"
          ".lisa-cover .better{color:#1a7f37;font-weight:600}.lisa-cover .worse{color:#cf222e;font-weight:600}"
          ".lisa-cover caption{caption-side:bottom;text-align:left;font-size:12px;color:#555;padding-top:4px}"
          "</style>")


#: the mean column's header and why that mean, per kind: a page's table quotes one kind
_MEAN_HEADERS = {"amean": ("Mean ± sd", ""),
                 "hmean": ("Hmean ± sd", "Hmean: the harmonic mean, for rates (higher is better): the mean of "
                                         "the time per unit of work, as mmtests quotes them. "),
                 "gmean": ("Gmean", "Gmean: the geometric mean, for ratios; no sd. ")}


def render_cover_html(table: pd.DataFrame, labels: Mapping[str, str] | None = None) -> str:
    """Self-styled HTML tables, one per kind of mean (its header says which and its caption
    why): workload and metric cells span their rows, better / worse verdicts coloured, the
    legend as its caption."""
    kinds = list(dict.fromkeys(table["mean_kind"])) if len(table) else ["amean"]
    if len(kinds) == 1:
        return _cover_html(table, labels, kinds[0])
    return "".join(_cover_html(table[table["mean_kind"] == kind], labels, kind) for kind in kinds)


def _cover_html(table: pd.DataFrame, labels: Mapping[str, str] | None, kind: str) -> str:
    rows = _rows(table, labels, tagged=False)
    left = {"workload", "metric", "variant", "verdict"}
    header, why = _MEAN_HEADERS.get(kind, ("Mean ± sd", ""))
    headers = [header if h == "Mean ± sd" else h for h in _headers(table)]
    head = "".join(f'<th class="{"l" if k in left else ""}">{escape.html(h)}</th>'
                   for k, h in zip(_KEYS, headers))
    spans: dict[tuple[int, str], int] = {}
    for key, fields in (("workload", ("workload",)), ("metric", ("workload", "metric"))):
        start = 0
        for i in range(1, len(rows) + 1):
            if i == len(rows) or [rows[i][f] for f in fields] != [rows[start][f] for f in fields]:
                spans[(start, key)] = i - start
                start = i
    body = []
    for i, row in enumerate(rows):
        cells = []
        for key in _KEYS:
            if key in ("workload", "metric"):
                if (i, key) not in spans:
                    continue
                cells.append(f'<td class="l" rowspan="{spans[(i, key)]}">{escape.html(row[key])}</td>')
                continue
            cls = ["l"] if key in left else []
            if key in ("change", "ci", "verdict") and row["verdict"] in ("better", "worse"):
                cls.append(row["verdict"])
            cells.append(f'<td class="{" ".join(cls)}">{escape.html(row[key])}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'{_STYLE}<table class="lisa-cover"><caption>{escape.html(why + _legend(table))}</caption>'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def render_cover_text(table: pd.DataFrame, labels: Mapping[str, str] | None = None) -> str:
    """mmtests-style text: per workload, variants as columns; per metric the mean with its
    sign-normalised % in ``( )`` (``* *`` when significant), sd, the interval, p and n."""
    out: list[str] = []
    for workload in dict.fromkeys(table["workload"]):
        block = table[table["workload"] == workload]
        variants = list(dict.fromkeys(block["variant"]))
        metrics = list(dict.fromkeys(block["metric"]))
        names = {m: escape.one_line(metric_label(m, block.loc[block["metric"] == m, "unit"].iloc[0], labels))
                 for m in metrics}
        name_w = max(len(n) for n in names.values())
        heads = [escape.one_line(v) for v in variants]
        col_w = max(24, *(len(v) + 2 for v in heads))
        out.append(escape.one_line(workload))
        out.append(" " * (8 + name_w) + "".join(f"{v:>{col_w}}" for v in heads))
        for metric in metrics:
            cells = {r["variant"]: r for r in block[block["metric"] == metric].to_dict("records")}
            kind = next(iter(cells.values()))["mean_kind"].capitalize()
            lines = {kind: [], "Stddev": [], f"CI{float(block['confidence'].iloc[0]) * 100:.0f}": [],
                     "P": [], "N": []}
            for variant in variants:
                row = cells.get(variant)
                if row is None:
                    for values in lines.values():
                        values.append("")
                    continue
                better = row["pct_change_better"]
                sign = -1.0 if row["lower_is_better"] else 1.0
                mark = "*" if row["significant"] else ("?" if row["too_few"] and not row["is_baseline"] else None)
                pct = "0.00%" if row["is_baseline"] else (f"{better:.2f}%" if math.isfinite(better) else "n/a")
                opening, closing = (mark, mark) if mark else ("(", ")")
                lines[kind].append(f"{row['mean']:.2f} {opening}{pct:>8}{closing}")
                lines["Stddev"].append(f"{row['stddev']:.2f}" if math.isfinite(row["stddev"]) else "n/a")
                low, high = sorted((sign * row["pct_ci_low"], sign * row["pct_ci_high"]))
                lines[list(lines)[2]].append("" if row["is_baseline"] else
                                             ("n/a" if math.isnan(low) else "unbounded" if math.isinf(low) or math.isinf(high)
                                              else f"[{low:.2f}%, {high:.2f}%]"))
                lines["P"].append("" if row["is_baseline"] else
                                  _p(row["p_value"]).replace(EMPTY, "n/a"))
                lines["N"].append(str(row["n"]))
            for label, values in lines.items():
                out.append(f"{label:<7} {names[metric]:<{name_w}}" + "".join(f"{v:>{col_w}}" for v in values))
        out.append("")
    if not table.empty:
        out.append("% changes are signed so that positive is better (mmtests' convention); "
                   "* significant, ? fewer than 3 runs.")
        out.append(_legend(table))
    return "\n".join(line.rstrip() for line in out) + "\n"


#: format name -> renderer(table, labels) -> text
FORMATS = {"cover": render_cover_markdown, "cover-html": render_cover_html, "cover-text": render_cover_text}


def render_cover(table: pd.DataFrame, fmt: str = "cover", labels: Mapping[str, str] | None = None) -> str:
    try:
        return FORMATS[fmt](table, labels)
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}") from None


class CoverLetterTable:
    """A cover-letter table with its metric labels: shown as HTML in a notebook,
    :meth:`markdown` / :meth:`text` for the letter itself, :attr:`frame` for more."""

    def __init__(self, frame: pd.DataFrame, labels: Mapping[str, str] | None = None):
        self.frame, self.labels = frame, dict(labels or {})

    def markdown(self) -> str:
        return render_cover_markdown(self.frame, self.labels)

    def html(self) -> str:
        return render_cover_html(self.frame, self.labels)

    def text(self) -> str:
        return render_cover_text(self.frame, self.labels)

    def _repr_html_(self) -> str:
        return self.html()

    def _repr_markdown_(self) -> str:
        return self.markdown()

