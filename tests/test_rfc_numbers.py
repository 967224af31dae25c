"""The RFC numbers under notebooks/rfc-numbers are the RFCs' own: every cell is checked
against the cover letter in ../shared/rfcs, read here with a parser of its own."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from lisa_ext.errors import SpecError
from lisa_ext.rfc_numbers import load_rfc_numbers, rfc_numbers_dir

REPO = Path(__file__).resolve().parents[1]
RFCS = REPO.parent / "shared" / "rfcs"
STUDIES = sorted(p.stem for p in rfc_numbers_dir().glob("*.yml"))

needs_rfcs = pytest.mark.skipif(not RFCS.is_dir(), reason=f"the RFC texts are not at {RFCS}")

# a number standing on its own: not part of a word such as "nvme0n1" or "gb5"
NUMBER = re.compile(r"(?<![A-Za-z0-9_.])[-+]?\d+(?:\.\d+)?(?![A-Za-z0-9_]|\.\d)")


def rfc_row_numbers(text: str, anchor: str, label: str) -> list[float]:
    """Numbers of the first line after ``anchor`` that starts with ``label`` (table pipes
    dropped); when that line has none, those of the next non-empty line that has some."""
    start = text.index(anchor) + len(anchor)
    lines = [" ".join(line.replace("|", " ").split()) for line in text[start:].splitlines()]
    head = re.compile(rf"^{re.escape(label)}(?:\s|$)")
    for i, line in enumerate(lines):
        if head.match(line):
            numbers = NUMBER.findall(line[len(label):])
            for follow in lines[i + 1:i + 3]:
                if numbers:
                    break
                numbers = NUMBER.findall(follow)
            return [float(n) for n in numbers]
    raise AssertionError(f"no line starting with {label!r} after {anchor!r}")


def test_every_study_has_its_rfc_numbers():
    assert STUDIES == ["idle-gating", "iowait-boost", "ondemand-bursty", "teo-util", "wq-affinity"]


@needs_rfcs
@pytest.mark.parametrize("study", STUDIES)
def test_every_cell_matches_the_rfc_text(study):
    numbers = load_rfc_numbers(study)
    text = (RFCS / numbers.rfc_file).read_text()
    assert numbers.title.split("] ", 1)[-1] in " ".join(text.split())
    for table in numbers.tables:
        assert table.anchor in text, (study, table.id)
        for label, _, values in table.rows:
            published = rfc_row_numbers(text, table.anchor, label)
            ours = [v for v in values if v is not None]
            assert len(published) == len(ours) and all(math.isclose(a, b) for a, b in zip(published, ours)), \
                f"{study} {table.id} row {label!r}: RFC {published}, transcribed {ours}"


@needs_rfcs
def test_a_few_cells_by_hand():
    """Spot checks written out from the RFC text, independent of the row parser."""
    gating = load_rfc_numbers("idle-gating").table("schbench-r30").frame()
    assert "| 99 | 889 | 40 (-95%) | 48 (-94%) |" in (RFCS / "004_edd2edb40ecb7d2c.txt").read_text()
    assert gating.loc["99", "Baseline"] == 889 and gating.loc["99", "w/ patch vs Baseline (%)"] == -94
    ondemand = load_rfc_numbers("ondemand-bursty").table("sleeping-ebizzy").frame()
    assert "40% 1090744 1107959 + 17215 (+1.578%)" in (RFCS / "003_6557c70084794ba6.wrapped.txt").read_text()
    assert list(ondemand.loc["40%"]) == [1090744, 1107959, 17215, 1.578]
    wq = load_rfc_numbers("wq-affinity").table("low").frame()
    assert "CACHE+STRICT 828.20 ±4.49 66.84 ±0.29 -16.65" in (RFCS / "001_0a2336b1a837911f.txt").read_text()
    assert wq.loc["CACHE+STRICT", "vs. SYSTEM BW (%)"] == -16.65


def test_tables_keep_the_rfc_order_and_units():
    gating = load_rfc_numbers("idle-gating")
    assert [t.id for t in gating.tables] == ["schbench-r30", "schbench-r10-m2-t1", "pgbench-c44", "pgbench-c1"]
    table = gating.table("pgbench-c1")
    assert list(table.frame().index) == ["latency avg. (ms)", "latency stddev", "trans. completed",
                                         "Avg. Energy (Watts)"]
    assert table.units()["latency avg. (ms)"] == "ms"
    assert [c.variant for c in table.columns if c.variant] == ["baseline", "idle-set-d10", "gating"]
    fio = load_rfc_numbers("iowait-boost").table("fio-rk3399")
    assert fio.row_variants == ("menu-boost", "menu-noboost", "teo-boost", "teo-noboost")


def test_bad_file_names_field(tmp_path):
    (tmp_path / "x.yml").write_text("rfc: {file: a.txt, title: t}\nhardware: h\ntables:\n"
                                    "  - {id: t, title: t, anchor: a, workload: w, row_header: r,\n"
                                    "     columns: [{name: c}], rows: [{label: l, values: [1, 2]}]}\n")
    with pytest.raises(SpecError) as exc:
        load_rfc_numbers("x", root=tmp_path)
    assert exc.value.key == "tables[0].rows[0].values" and "1 numbers" in exc.value.problem
    with pytest.raises(SpecError, match="no RFC numbers for study 'y'; known: x"):
        load_rfc_numbers("y", root=tmp_path)
