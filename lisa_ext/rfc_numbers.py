"""The numbers each study's RFC published, as data: ``notebooks/rfc-numbers/<study>.yml``.

Each file transcribes the tables of one cover letter in ``../shared/rfcs/`` (rows and
columns in the RFC's order, with the RFC's hardware and units) so that a notebook can
print "their numbers beside ours" in the same table shape. A file looks like::

    rfc: {file: 004_edd2edb40ecb7d2c.txt, title: ..., author: ..., date: 2020-05-07}
    hardware: what the RFC ran on
    tables:
      - id: schbench-r30
        title: schbench -r 30
        anchor: "$> schbench -r 30"     # text just before the table in the RFC file
        workload: schbench -r 30
        row_header: "%ile Latency (in us)"
        columns:                        # one per number of a row, in the RFC's order
          - {name: Baseline, unit: us, variant: baseline}   # variant: ours that matches
        rows:
          - {label: "50", values: [371, ...]}               # null: a cell the RFC left empty

``tests/test_rfc_numbers.py`` checks every cell against the RFC text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from lisa_ext.schema import load_yaml, show
from lisa_ext.errors import SpecError
from lisa_ext.workbench import workbench_path

__all__ = ["RfcColumn", "RfcNumbers", "RfcTable", "load_rfc_numbers", "rfc_numbers_dir"]


def rfc_numbers_dir() -> Path:
    """``notebooks/rfc-numbers/`` of the workbench: one YAML file per study, named after its notebook."""
    return workbench_path("notebooks", "rfc-numbers")


@dataclass(frozen=True)
class RfcColumn:
    name: str
    unit: str | None = None
    #: the name of our variant that corresponds to this column, if any
    variant: str | None = None


@dataclass(frozen=True)
class RfcTable:
    id: str
    title: str
    anchor: str
    workload: str
    row_header: str
    columns: tuple[RfcColumn, ...]
    #: (label, unit or None, values) per row; a value is None where the RFC prints nothing
    rows: tuple[tuple[str, str | None, tuple[float | None, ...]], ...]
    #: set where the table's hardware differs from the RFC-wide one
    hardware: str | None = None
    #: set where a row's label names our variant (tables with one row per variant)
    row_variants: tuple[str | None, ...] = ()

    def frame(self) -> pd.DataFrame:
        """The table as the RFC prints it: index = row labels, columns = the RFC's column names."""
        df = pd.DataFrame([list(values) for _, _, values in self.rows],
                          index=pd.Index([label for label, _, _ in self.rows], name=self.row_header or None),
                          columns=[c.name for c in self.columns], dtype="float64")
        return df

    def units(self) -> dict[str, str | None]:
        """Unit of each row: the row's own if given, else None (the column units apply)."""
        return {label: unit for label, unit, _ in self.rows}


@dataclass(frozen=True)
class RfcNumbers:
    study: str
    path: Path
    rfc_file: str
    title: str
    author: str | None
    date: str
    hardware: str
    tables: tuple[RfcTable, ...]

    def table(self, table_id: str) -> RfcTable:
        for table in self.tables:
            if table.id == table_id:
                return table
        raise KeyError(f"{self.path}: no table {table_id!r}; tables: {', '.join(t.id for t in self.tables)}")


def _require(path: Path, doc: dict, key: str, where: str, kind: type | tuple[type, ...] = str) -> Any:
    if key not in doc:
        raise SpecError(path, f"{where}{key}", "missing")
    value = doc[key]
    if not isinstance(value, kind):
        raise SpecError(path, f"{where}{key}", f"expected {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def _parse_table(path: Path, raw: Any, index: int) -> RfcTable:
    where = f"tables[{index}]."
    if not isinstance(raw, dict):
        raise SpecError(path, f"tables[{index}]", "expected a mapping")
    columns = []
    for j, col in enumerate(_require(path, raw, "columns", where, list)):
        if not isinstance(col, dict) or not isinstance(col.get("name"), str):
            raise SpecError(path, f"{where}columns[{j}]", "expected {name: ..., unit: ..., variant: ...}")
        columns.append(RfcColumn(col["name"], col.get("unit"), col.get("variant")))
    rows, row_variants = [], []
    for j, row in enumerate(_require(path, raw, "rows", where, list)):
        key = f"{where}rows[{j}]"
        if not isinstance(row, dict) or not isinstance(row.get("label"), str):
            raise SpecError(path, key, "expected {label: ..., values: [...]}")
        values = row.get("values")
        if not isinstance(values, list) or len(values) != len(columns):
            raise SpecError(path, f"{key}.values", f"expected a list of {len(columns)} numbers (one per column)")
        if not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
                   for v in values):
            raise SpecError(path, f"{key}.values", f"expected finite numbers or null, got {show(values)}")
        rows.append((row["label"], row.get("unit"), tuple(None if v is None else float(v) for v in values)))
        row_variants.append(row.get("variant"))
    return RfcTable(
        id=_require(path, raw, "id", where), title=_require(path, raw, "title", where),
        anchor=_require(path, raw, "anchor", where), workload=_require(path, raw, "workload", where),
        row_header=_require(path, raw, "row_header", where), columns=tuple(columns), rows=tuple(rows),
        hardware=raw.get("hardware"),
        row_variants=tuple(row_variants) if any(row_variants) else (),
    )


def load_rfc_numbers(study: str, root: Path | None = None) -> RfcNumbers:
    """The RFC tables of ``study`` (a notebook name such as ``idle-gating``)."""
    root = rfc_numbers_dir() if root is None else root
    path = root / f"{study}.yml"
    if not path.is_file():
        known = sorted(p.stem for p in root.glob("*.yml"))
        raise SpecError(path, "file", f"no RFC numbers for study {study!r}; known: {', '.join(known)}")
    doc = load_yaml(path, "RFC numbers")
    if not isinstance(doc, dict):
        raise SpecError(path, "file", "expected a mapping with keys rfc, hardware, tables")
    rfc = _require(path, doc, "rfc", "", dict)
    tables = tuple(_parse_table(path, t, i) for i, t in enumerate(_require(path, doc, "tables", "", list)))
    return RfcNumbers(
        study=study, path=path, rfc_file=_require(path, rfc, "file", "rfc."),
        title=_require(path, rfc, "title", "rfc."), author=rfc.get("author"), date=str(rfc.get("date")),
        hardware=_require(path, doc, "hardware", ""), tables=tables,
    )
