"""Table renderers reproduce the RFC cover letters' own tables from their numbers.

The inputs are the means printed in the RFCs (../shared/rfcs/); the expected
output is the RFC text itself, read from the file, so a renderer that drifts
from mmtests' layout, the Markdown cells or the ± table fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from lisa_ext import stats
from lisa_ext.report import tables

RFCS = Path(__file__).resolve().parents[1].parent / "shared" / "rfcs"
IOWAIT = RFCS / "000_58751f302850aa96.txt"
WORKQUEUE = RFCS / "001_0a2336b1a837911f.txt"
TEO = RFCS / "002_848c98aeabb03b00.txt"

MMTESTS_VARIANTS = ["menu+boost", "menu-boost", "teo+boost", "teo-boost", "menu+boost-again"]
_CELL = re.compile(r"\s+(-?\d+\.\d\d) ([(*])\s*(-?\d+\.\d\d)%([)*])")


def _mmtests_blocks() -> list[list[str]]:
    """Consecutive 'Hmean' lines of the RFC, one list per benchmark."""
    blocks, current = [], []
    for line in IOWAIT.read_text().splitlines():
        if line.startswith("Hmean "):
            current.append(line.rstrip())
        elif current:
            blocks.append(current)
            current = []
    return blocks


def _parse_mmtests_line(line: str):
    first = _CELL.search(line)
    metric = line[len("Hmean"):first.start()].strip()
    cells = [(float(v), o == "*") for v, o, _pct, _c in _CELL.findall(line[first.start():])]
    return metric, cells


def _summary_frame(rows) -> pd.DataFrame:
    return pd.DataFrame(rows)


_PCT = re.compile(r"[-+]?\d+\.\d+(?=%)")
_NUM = re.compile(r"-?\d+\.\d\d(?!%)")


def _pct_bounds(new: float, base: float) -> tuple[float, float]:
    """Range of the % change when both means were rounded to 2 decimals."""
    if base == 0:
        return (0.0, 0.0)
    corners = [(n / b - 1) * 100 for n in (new - 0.005, new + 0.005)
               for b in (base - 0.005, base + 0.005)]
    return (min(corners) - 0.005, max(corners) + 0.005)


def _assert_same_up_to_published_rounding(ours: str, theirs: str) -> None:
    """Byte-identical, except that a % change may differ where the RFC computed it
    from unrounded means: the RFC's figure must then lie within what the rounded
    means it prints allow."""
    if ours == theirs:
        return
    assert _PCT.sub("P", ours) == _PCT.sub("P", theirs), (ours, theirs)
    values = [float(v) for v in _NUM.findall(theirs)]
    for i, (a, b) in enumerate(zip(_PCT.findall(ours), _PCT.findall(theirs))):
        if a != b:
            lo, hi = _pct_bounds(values[i], values[0])
            assert abs(float(a) - float(b)) <= 0.011 and lo <= float(b) <= hi, (ours, theirs)


def test_rfc_has_the_expected_mmtests_tables():
    blocks = _mmtests_blocks()
    assert len(blocks) == 9 and sum(map(len, blocks)) == 30


@pytest.mark.parametrize("block", _mmtests_blocks(), ids=lambda b: _parse_mmtests_line(b[0])[0])
def test_mmtests_rows_match_rfc(block):
    rows, stars = [], {}
    for line in block:
        metric, cells = _parse_mmtests_line(line)
        assert len(cells) == len(MMTESTS_VARIANTS)
        for variant, (hmean, starred) in zip(MMTESTS_VARIANTS, cells):
            rows.append(dict(workload="bench", metric=metric, unit="", lower_is_better=False,
                             variant=variant, n=5, hmean=hmean))
            stars[(metric, variant)] = starred
    cmp = stats.compare_summaries(_summary_frame(rows), "menu+boost")
    # the RFC gives no spread, so the significance marks are taken from it as published
    cmp["significant"] = [stars[(m, v)] for m, v in zip(cmp["metric"], cmp["variant"])]
    text = tables.render_mmtests(cmp, stats=("mean",), legend=False)
    rendered = [line for line in text.splitlines() if line.startswith("Hmean")]
    assert len(rendered) == len(block)
    for ours, theirs in zip(rendered, block):
        _assert_same_up_to_published_rounding(ours, theirs)


def test_pgbench_changes():
    rows = [dict(workload="pgbench", metric=m, unit="tps", lower_is_better=False, variant=v,
                 n=3, hmean=h)
            for m, pairs in {"1": (726.68, 713.79), "4": (2213.45, 2716.60)}.items()
            for v, h in zip(("base", "new"), pairs)]
    cmp = stats.compare_summaries(pd.DataFrame(rows), "base").set_index(["metric", "variant"])
    assert f"{cmp.loc[('1', 'new'), 'pct_change']:.2f}" == "-1.77"
    assert f"{cmp.loc[('4', 'new'), 'pct_change']:.2f}" == "22.73"


def _markdown_rows(path: Path, first_cell: str) -> list[str]:
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in {path}")


GB5 = {  # gmean over 3 Geekbench 5 iterations, from the RFC's first table
    "score": ("", False, [2716.4, 2795, 2780.5, 2830.8]),
    "task wakeup latency (gb5)": ("μs", True, [82.05, 73.97, 42.05, 66.91]),
    "task wakeup latency (asynctask)": ("μs", True, [75.66, 56.58, 65.78, 55.35]),
}
TEO_VARIANTS = ["menu", "teo", "shallow", "teo + util-aware"]


def _gb5_comparison() -> pd.DataFrame:
    rows = [dict(workload="Geekbench 5", metric=metric, unit=unit, lower_is_better=lib,
                 variant=v, n=3, gmean=g)
            for metric, (unit, lib, values) in GB5.items()
            for v, g in zip(TEO_VARIANTS, values)]
    return stats.compare_summaries(pd.DataFrame(rows), "menu", mean="gmean")


def test_markdown_cells_match_rfc():
    text = tables.render_markdown(_gb5_comparison())
    for metric in GB5:
        label = f"gmean {metric}"
        ours = _markdown_rows_from_text(text, label)
        theirs = _markdown_rows(TEO, label)
        # 42.05 vs 82.05 is -48.75% from the rounded means, -48.76% in the RFC
        _assert_same_up_to_published_rounding(" | ".join(ours), " | ".join(theirs))
    assert "| 2795 (+2.89%) " in text and "2830.8 (+4.21%)" in text


def _markdown_rows_from_text(text: str, first_cell: str) -> list[str]:
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in:\n{text}")


def test_latency_change_raw_and_sign_normalised():
    cmp = _gb5_comparison().set_index(["metric", "variant"])
    cell = cmp.loc[("task wakeup latency (gb5)", "teo")]
    assert f"{cell['pct_change']:.2f}" == "-9.85"
    assert f"{cell['pct_change_better']:+.2f}" == "+9.85"
    assert "73.97μs (-9.85%)" in tables.render_markdown(_gb5_comparison())


WQ_HIGH = {  # bandwidth MiBps mean ±sd and CPU util % ±sd over 5 runs, HIGH scenario
    "SYSTEM": (1159.40, 1.34, 99.31, 0.02),
    "CACHE": (1166.40, 0.89, 99.34, 0.01),
    "CACHE+STRICT": (1166.00, 0.71, 99.35, 0.01),
    "SYSTEM+LOCAL": (1157.40, 1.67, 99.50, 0.01),
    "CACHE+LOCAL": (1160.40, 0.55, 99.50, 0.02),
}


def test_workqueue_sd_table_matches_rfc():
    rows = []
    for variant, (bw, bw_sd, util, util_sd) in WQ_HIGH.items():
        rows.append(dict(workload="HIGH", metric="Bandwidth", unit="MiBps", lower_is_better=False,
                         variant=variant, n=5, amean=bw, stddev=bw_sd))
        rows.append(dict(workload="HIGH", metric="CPU util", unit="%", lower_is_better=True,
                         variant=variant, n=5, amean=util, stddev=util_sd))
    cmp = stats.compare_summaries(pd.DataFrame(rows), "SYSTEM", mean="amean")
    text = tables.render_sd(cmp)
    ours = [line.split() for line in text.splitlines()[2:] if line]
    rfc_lines = WORKQUEUE.read_text().splitlines()
    start = rfc_lines.index("1. HIGH: Enough issuers and work spread across the machine")
    expected = [line.split() for line in rfc_lines[start + 4:start + 9]]
    assert ours == expected
    assert ours[1][-1] == "+0.60"


def test_renderers_are_byte_stable_and_lkp_csv_carry_the_numbers():
    cmp = _gb5_comparison()
    for fmt in tables.FORMATS:
        assert tables.render(cmp, fmt) == tables.render(cmp.copy(), fmt)
    lkp = tables.render_lkp(cmp).splitlines()
    score = next(line for line in lkp if line.endswith("Geekbench 5.score"))
    assert score.split()[:3] == ["2716", "+2.9%", "2795"]
    csv = tables.render_csv(cmp)
    assert csv.splitlines()[0].split(",") == stats.COMPARISON_COLUMNS
    assert "p_value" in csv.splitlines()[0]
