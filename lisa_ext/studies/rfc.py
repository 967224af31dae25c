"""An RFC's published table beside ours, in its shape, and whether the direction agrees.

The RFC's numbers come from ``notebooks/rfc-numbers/<study>.yml``
(:mod:`lisa_ext.rfc_numbers`); ours from a study module's ``rfc_tables()``: a frame
with the RFC table's row labels as index and its column names as columns. The
result keeps the RFC's rows and columns in its order and puts, under each of its
columns, the RFC's value and ours, so a reader compares cell by cell; the caption
says whose hardware each side is.

Our frames carry their cells' per-run values in ``frame.attrs["samples"]``
(``{(row, column): values}``, :data:`SAMPLES`) and the kind of mean of their cells in
``frame.attrs["mean"]``: :func:`direction` judges our change on its confidence interval
(:mod:`lisa_ext.stats.verdict`), not on the sign of the difference of two means.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

import pandas as pd

from lisa_ext.campaign.store.reader import read_campaign
from lisa_ext.errors import UserError
from lisa_ext.report.readable import page_styler
from lisa_ext.rfc_numbers import RfcTable, load_rfc_numbers
from lisa_ext.stats import MeanKind, mean_of
from lisa_ext.stats.change import pct_change_ci
from lisa_ext.stats.verdict import AGREES, NO_VERDICT, OPPOSITE, WITHIN_NOISE, direction_verdict, sign_of
from lisa_ext.target.timing import timing_of

__all__ = ["EMPTY_CELL", "SAMPLES", "beside_rfc", "campaign_platform", "campaign_timing", "concat_rows",
           "direction", "direction_sentence", "rfc_arithmetic", "rows_from_metrics", "show_beside_rfc", "styled",
           "timing_text", "variant_table"]

#: ``frame.attrs`` key of our cells' per-run values: ``{(row label, column): [values]}``
SAMPLES = "samples"
_VERDICT_WORDS = {AGREES: "the direction agrees", OPPOSITE: "the opposite direction",
                  WITHIN_NOISE: "no change within our noise"}

#: how a cell neither side has prints: never "nan" or "n/a<unit>"
EMPTY_CELL = "–"

def _platform_names(runs) -> set[str]:
    """How the runs' platforms are named: each target config's ``lisa-ext: description`` as the
    runs recorded it, else its name."""
    platforms = [run.meta.get("platform") or {} for run in runs]
    names = {str(p.get("description") or p.get("name") or "") for p in platforms}
    names.discard("")
    return names


def _timing(runs) -> str | None:
    # what each run recorded, never the target's name: a kernel without the modules has no timing
    timings = {run.meta.get("board_timing") or timing_of((run.meta.get("kernel") or {}).get("emulation"))
               for run in runs}
    timings.discard(None)
    return " + ".join(sorted(timings)) or None


def campaign_timing(campaign_dir: str | os.PathLike) -> str | None:
    """The emulation modules' timing (:mod:`lisa_ext.target.timing`) a campaign's runs recorded:
    ``faithful``, ``decisions``, both joined by `` + ``, or None when no run's kernel loaded the
    modules (off the virtual board)."""
    return _timing(read_campaign(Path(campaign_dir)).ok_runs)


def _clock(runs) -> str:
    # runs from before the clock was recorded ran on the host's
    return " + ".join(sorted({str(run.meta.get("board_clock") or "host") for run in runs}))


def timing_text(campaign_dir: str | os.PathLike, *, decisions: str, faithful: str, board: str,
                faithful_virtual: str | None = None) -> str:
    """What a page says of a campaign's platform: ``decisions`` or ``faithful`` for runs on the
    virtual board in that timing (:func:`campaign_timing`), ``faithful_virtual`` (when given) for
    faithful runs on the board's own clock, ``board`` for runs elsewhere; runs in both timings get a
    sentence saying so, since nothing on the page compares them."""
    runs = read_campaign(Path(campaign_dir)).ok_runs
    timing = _timing(runs)
    if timing is None:
        return board
    if timing == "faithful" and faithful_virtual is not None and _clock(runs) == "virtual":
        return faithful_virtual
    texts = {"decisions": decisions, "faithful": faithful}
    return texts.get(timing, f"Its runs mix the board's timings ({timing}): their directions cannot be read "
                             "together; rerun the campaign in one timing.")


def campaign_platform(campaign_dir: str | os.PathLike) -> str:
    """The platform a campaign ran on, as a table caption names it (from its runs' provenance),
    with the virtual board's timing (:func:`campaign_timing`) and clock when its runs recorded a timing."""
    runs = read_campaign(Path(campaign_dir)).ok_runs
    names = _platform_names(runs)
    if not names:
        return "this platform"
    platform = " + ".join(sorted(names))
    timing = _timing(runs)
    return f"{platform}, {timing} timing, {_clock(runs)} clock" if timing else platform


def _check_shape(table: RfcTable, ours: pd.DataFrame, where: str) -> pd.DataFrame:
    rfc = table.frame()
    extra_rows = [r for r in ours.index if r not in rfc.index]
    extra_cols = [c for c in ours.columns if c not in rfc.columns]
    if extra_rows or extra_cols:
        raise UserError(f"{where}: our table has rows {extra_rows} / columns {extra_cols} that the RFC's "
                        f"table {table.id!r} does not; its rows: {list(rfc.index)}, columns: {list(rfc.columns)}")
    return ours.reindex(index=rfc.index, columns=rfc.columns).astype("float64")


def rows_from_metrics(metrics: pd.DataFrame, rows: dict[str, str], mean: MeanKind = "amean",
                      workload: str | None = None) -> pd.DataFrame:
    """RFC row label -> our metric, averaged over iterations (``mean``) per variant:
    index = the row labels, columns = variants (in the table's order). Rows whose
    metric no run reported are left out (their cells stay empty)."""
    if workload is not None:
        metrics = metrics[metrics["workload"] == workload]
    variants = list(dict.fromkeys(metrics["variant"]))
    out = pd.DataFrame(index=list(rows), columns=variants, dtype="float64")
    samples = {}
    for label, metric in rows.items():
        for variant, group in metrics[metrics["metric"] == metric].groupby("variant", sort=False):
            out.loc[label, variant] = mean_of(group["value"], mean)
            samples[(label, variant)] = [float(v) for v in group["value"]]
    out = out.dropna(how="all")
    out.attrs.update({SAMPLES: samples, "mean": mean})
    return out


def concat_rows(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Frames of :func:`rows_from_metrics` (other rows each) as one, their per-run values kept."""
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames)
    out.attrs = {SAMPLES: {k: v for f in frames for k, v in f.attrs.get(SAMPLES, {}).items()},
                 "mean": frames[0].attrs.get("mean", "amean")}
    return out


def variant_table(study: str, table_id: str, values: pd.DataFrame) -> pd.DataFrame:
    """Our numbers in the shape of an RFC table with one column per variant.

    ``values``: index = the RFC's row labels (missing rows stay empty), columns = our
    variant names. Each RFC column naming a variant (``variant:`` in the numbers file)
    takes that variant's values; a percentage column right after it (unit ``%``, no
    variant: "menu (%)", "idle-set -D 10 vs Baseline (%)") takes that variant's change
    against the table's first variant column, as the RFCs print them.
    """
    table = load_rfc_numbers(study).table(table_id)
    out = pd.DataFrame(index=table.frame().index, columns=[c.name for c in table.columns], dtype="float64")
    rows = [r for r in values.index if r in out.index]
    first = next((c.variant for c in table.columns if c.variant), None)
    previous, seen = None, set()
    ours_samples, samples = values.attrs.get(SAMPLES, {}), {}
    for col in table.columns:
        if col.variant is not None:
            # a repeated column (the RFC's second run of its baseline, showing its error margin)
            # stays empty: copying our first one would fake that margin
            previous = col.variant if col.variant not in seen else None
            seen.add(col.variant)
            if previous in values.columns:
                out.loc[rows, col.name] = values.loc[rows, col.variant].astype("float64")
                samples.update({(row, col.name): ours_samples[(row, col.variant)]
                                for row in rows if (row, col.variant) in ours_samples})
        elif col.unit == "%":
            if previous in values.columns and first in values.columns:
                base = values.loc[rows, first].astype("float64")
                out.loc[rows, col.name] = 100.0 * (values.loc[rows, previous].astype("float64") - base) / base.abs()
        else:
            # a column we have no variant for (RFC 002's "shallow"): its "(%)" column stays empty
            # rather than repeat the change of the variant before it
            previous = None
    out.attrs.update({SAMPLES: samples, "mean": values.attrs.get("mean", "amean")})
    return out


def _header(column: str, unit: str | None) -> str:
    # a column naming its unit already ("Bandwidth (MiBps)") keeps it: one unit per header
    named = column.rstrip().endswith(")") or column.rstrip().endswith("]")
    return column if not unit or unit in column or named else f"{column} [{unit}]"


def _pct_sources(table: RfcTable) -> dict[str, tuple[str, str]]:
    """Each percentage column named after the column before it ("teo (%)", "w/ patch vs Baseline
    (%)": that column against the table's first) -> (the first value column, that column)."""
    first = next((c.name for c in table.columns if c.unit != "%"), None)
    out, previous = {}, None
    for col in table.columns:
        if col.unit != "%":
            previous = col.name
        elif previous not in (None, first) and col.name.startswith(f"{previous} "):
            out[col.name] = (first, previous)
    return out


def rfc_arithmetic(study: str, table_id: str, *, tolerance_pct: float = 1.5) -> pd.DataFrame:
    """The RFC's printed "vs" percentages that its own numbers do not give: one row per such
    cell (``row``, ``column``, ``printed``, ``recomputed``), more than ``tolerance_pct``
    points apart (the RFCs round). Empty when the arithmetic checks out."""
    table = load_rfc_numbers(study).table(table_id)
    rfc = table.frame()
    rows = []
    for column, (base, new) in _pct_sources(table).items():
        for label in rfc.index:
            printed, b, n = rfc.loc[label, column], rfc.loc[label, base], rfc.loc[label, new]
            if any(pd.isna(x) for x in (printed, b, n)) or b == 0:
                continue
            recomputed = 100.0 * (n - b) / abs(b)
            if abs(recomputed - printed) > tolerance_pct:
                rows.append({"row": label, "column": column, "printed": float(printed),
                             "recomputed": recomputed})
    return pd.DataFrame(rows, columns=["row", "column", "printed", "recomputed"])


def beside_rfc(study: str, table_id: str, ours: pd.DataFrame) -> pd.DataFrame:
    """The RFC table ``table_id`` of ``study`` with ours beside it.

    Columns: a two-level index (the RFC's column with its unit, ``"RFC"`` / ``"ours"``),
    rows: the RFC's. Cells ours cannot fill are NaN (shown as :data:`EMPTY_CELL`).
    """
    table = load_rfc_numbers(study).table(table_id)
    ours = _check_shape(table, ours, f"{study}/{table_id}")
    rfc = table.frame()
    pieces = {}
    for col in table.columns:
        header = _header(col.name, col.unit)
        pieces[(header, "RFC")] = rfc[col.name]
        pieces[(header, "ours")] = ours[col.name]
    out = pd.DataFrame(pieces)
    out.columns = pd.MultiIndex.from_tuples(out.columns, names=[table.row_header or None, None])
    return out


def show_beside_rfc(study: str, table_id: str, ours: pd.DataFrame, platform: str):
    """:func:`beside_rfc` styled for a notebook: the RFC's title and both platforms in the
    caption, empty cells as :data:`EMPTY_CELL`, three significant digits. An RFC percentage
    its own numbers do not give (:func:`rfc_arithmetic`) shows both, flagged."""
    numbers = load_rfc_numbers(study)
    table = numbers.table(table_id)
    frame = beside_rfc(study, table_id, ours)
    caption = (f"{table.title} — RFC: {table.hardware or numbers.hardware}; "
               f"ours: {platform}")
    wrong = rfc_arithmetic(study, table_id)
    if wrong.empty:
        return styled(frame, caption)
    text = frame.apply(lambda column: column.map(_cell)).astype(object)
    for row in wrong.itertuples(index=False):
        unit = next(c.unit for c in table.columns if c.name == row.column)
        text.loc[row.row, (_header(row.column, unit), "RFC")] = \
            f"{_cell(row.printed)} † (its numbers: {row.recomputed:+.0f})"
    caption += (" — † the RFC prints a percentage its own numbers do not give; both are shown, "
                "and the sentences below use the recomputed one")
    return _styled(page_styler(text, str, na_rep=EMPTY_CELL, caption=caption))


def _styled(styler):
    # the row header heads the columns' first level already: no second header row for the index name
    return styler.hide(axis="index", names=True)


def styled(frame: pd.DataFrame, caption: str):
    """A table as the study pages print them: empty cells as :data:`EMPTY_CELL`, three
    significant digits, ``caption`` above, every text HTML-escaped (the caption names the
    platform its runs recorded)."""
    return _styled(page_styler(frame, _cell, na_rep=EMPTY_CELL, caption=caption))


def _cell(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return EMPTY_CELL
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _change(values: pd.Series, baseline: str, column: str) -> float:
    base, new = values.get(baseline), values.get(column)
    if base is None or new is None or pd.isna(base) or pd.isna(new) or base == 0:
        return math.nan
    return 100.0 * (new - base) / abs(base)


def direction(study: str, table_id: str, ours: pd.DataFrame, row: str, baseline: str, column: str,
              *, tolerance_pct: float = 1.0, confidence: float = 0.95) -> str:
    """One sentence: does ``row`` change from column ``baseline`` to ``column`` the same way
    in our table as in the RFC's? Judged on the ``confidence`` interval of our change of the
    table's mean (:func:`lisa_ext.stats.change.pct_change_ci` on our cells' per-run values,
    ``ours.attrs["samples"]``; :mod:`lisa_ext.stats.verdict`): it agrees, goes the opposite
    way, or is no change within our noise. An RFC change within ``tolerance_pct`` counts as
    no change."""
    table = load_rfc_numbers(study).table(table_id)
    samples = ours.attrs.get(SAMPLES, {})
    mean = ours.attrs.get("mean", "amean")
    ours = _check_shape(table, ours, f"{study}/{table_id}")
    rfc = table.frame()
    if row not in rfc.index:
        raise UserError(f"{study}/{table_id}: no row {row!r}; rows: {list(rfc.index)}")
    theirs_pct = _change(rfc.loc[row], baseline, column)
    ours_pct = _change(ours.loc[row], baseline, column)
    what = f"{row}, {column} vs {baseline}"
    if math.isnan(ours_pct) or math.isnan(theirs_pct):
        return f"{what}: no comparison (a cell is empty on one side)."
    return direction_sentence(what, theirs_pct, ours_pct, samples.get((row, baseline), ()),
                              samples.get((row, column), ()), mean=mean, tolerance_pct=tolerance_pct,
                              confidence=confidence)


def direction_sentence(what: str, theirs_pct: float, ours_pct: float, base: Sequence[float],
                       new: Sequence[float], *, mean: MeanKind = "amean", tolerance_pct: float = 1.0,
                       confidence: float = 0.95) -> str:
    """``"<what>: RFC +x %, ours +y % (95 % CI a to b %, n and m runs) — <verdict>."``: our
    change ``ours_pct`` judged on the interval of the change of ``new``'s mean over ``base``'s
    (per-run values), against the RFC's ``theirs_pct`` (within ``tolerance_pct``: no change)."""
    low, high = pct_change_ci(base, new, kind=mean, confidence=confidence)
    rfc_sign = sign_of(theirs_pct, tolerance_pct)
    verdict = direction_verdict(low, high, rfc_sign)
    head = f"{what}: RFC {theirs_pct:+.1f} %, ours {ours_pct:+.1f} %"
    if verdict == NO_VERDICT:
        return (f"{head} — no verdict: a confidence interval needs two runs per variant "
                f"(we have {len(base)} and {len(new)}).")
    interval = (f"{low:+.1f} to {high:+.1f} %" if math.isfinite(low) and math.isfinite(high)
                else "unbounded")
    words = "no change within our noise, as in the RFC" if verdict == AGREES and not rfc_sign \
        else _VERDICT_WORDS[verdict]
    return f"{head} ({confidence * 100:.0f} % CI {interval}, {len(base)} and {len(new)} runs) — {words}."
