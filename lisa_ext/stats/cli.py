"""``lisa-ext compare``: compare variants of a metrics table and print a table; with ``--rerun``,
whether a second run of the same campaign says the same, row by row.

A command module is an orchestrator: it may use the report layer's renderers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from lisa_ext.errors import UserError
from lisa_ext.report.tables import render
from lisa_ext.stats.compare import compare
from lisa_ext.stats.cover import with_verdicts
from lisa_ext.stats.metrics import read_metrics
from lisa_ext.stats.rerun import rerun_summary, rerun_table

__all__ = ["register", "run"]

FORMAT_NAMES = ("mmtests", "markdown", "lkp", "sd", "csv", "cover", "cover-html", "cover-text")
TEST_NAMES = ("welch", "mwu", "ks", "mmtests")
MEAN_NAMES = ("auto", "amean", "hmean", "gmean")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare", help="compare variants in a metrics table",
        description="Compare every variant of a tidy metrics table (CSV or Parquet with "
                    "columns campaign, variant, workload, metric, unit, lower_is_better, "
                    "iteration, value) against a baseline variant.")
    p.add_argument("metrics", metavar="METRICS", help="metrics table, .csv or .parquet")
    p.add_argument("--baseline", required=True, metavar="VARIANT",
                   help="variant every other one is compared with")
    p.add_argument("--format", default="mmtests", choices=FORMAT_NAMES,
                   help="table format (default: mmtests); cover, cover-html, cover-text: the "
                        "cover-letter table (mean ± sd, %% change and its confidence interval, "
                        "p-value, verdict, n) as Markdown, HTML or mmtests-style text")
    p.add_argument("--test", default="welch", choices=TEST_NAMES,
                   help="significance test (default: welch)")
    p.add_argument("--mean", default="auto", choices=MEAN_NAMES,
                   help="mean to report; auto = hmean when higher is better, else amean")
    p.add_argument("--alpha", type=float, default=0.05, metavar="ALPHA",
                   help="significance level (default: 0.05)")
    p.add_argument("--confidence", type=float, default=0.95, metavar="LEVEL",
                   help="confidence level of the intervals (default: 0.95)")
    p.add_argument("--variants", metavar="A,B,...",
                   help="variants to show, in this order (default: all, baseline first)")
    p.add_argument("--workload", action="append", metavar="NAME",
                   help="only this workload (repeatable)")
    p.add_argument("--rerun", metavar="METRICS2",
                   help="a second run's metrics table: per row, both runs' %% change with its interval and "
                        "verdict, whether each estimate lies in the other's interval, and a summary line "
                        "(--format csv: the table only; any other format: a text table)")
    p.add_argument("-o", "--out", metavar="FILE", help="write the table here instead of stdout")
    p.set_defaults(func=run)


def _first_line(path: Path) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.readline(4096)


def _read(path: str, workloads: list[str] | None, baseline: str) -> pd.DataFrame:
    """The metrics table at ``path``, narrowed to ``workloads``; a UserError naming the file when it
    is empty or has no ``baseline`` variant (with --rerun there are two tables to tell apart)."""
    metrics = read_metrics(path)
    if workloads:
        unknown = sorted(set(workloads) - set(metrics["workload"]))
        if unknown:
            raise UserError(f"{path}: no workload {', '.join(unknown)}; workloads are: "
                            f"{', '.join(dict.fromkeys(metrics['workload']))}")
        metrics = metrics[metrics["workload"].isin(workloads)]
    if metrics.empty:
        raise UserError(f"{path}: the metrics table has no rows")
    if baseline not in set(metrics["variant"]):
        raise UserError(f"{path}: baseline variant {baseline!r} is not in the table; variants are: "
                        f"{', '.join(dict.fromkeys(metrics['variant']))}")
    return metrics


def _rerun_text(table: pd.DataFrame) -> str:
    """The rerun table as text: a run's change as ``-12.3 [-15.1, -9.4] better``."""
    def cell(row, run: str) -> str:
        if pd.isna(row[f"pct_change_{run}"]):
            return "-"
        return (f"{row[f'pct_change_{run}']:+.1f} [{row[f'pct_ci_low_{run}']:+.1f}, "
                f"{row[f'pct_ci_high_{run}']:+.1f}] {row[f'verdict_{run}']}")

    shown = pd.DataFrame({
        "workload": table["workload"], "metric": table["metric"], "variant": table["variant"],
        "first run, % change [CI]": [cell(r, "first") for _, r in table.iterrows()],
        "second run": [cell(r, "second") for _, r in table.iterrows()],
        "same verdict": table["same_verdict"].map({True: "yes", False: "no"}),
        "each in the other's CI": (table["first_in_second"] & table["second_in_first"]).map({True: "yes", False: "no"}),
    })
    return shown.to_string(index=False) + "\n" + rerun_summary(table) + "\n"


def run(args: argparse.Namespace) -> int:
    metrics = _read(args.metrics, args.workload, args.baseline)
    variants = [v for v in args.variants.split(",") if v] if args.variants else None
    if not 0 < args.confidence < 1:
        raise UserError(f"--confidence must be between 0 and 1, got {args.confidence}")
    if args.rerun:
        table = rerun_table(metrics, _read(args.rerun, args.workload, args.baseline), args.baseline, test=args.test,
                            mean=args.mean, alpha=args.alpha, confidence=args.confidence, variants=variants)
        text = table.to_csv(index=False) if args.format == "csv" else _rerun_text(table)
    else:
        table = compare(metrics, args.baseline, test=args.test, mean=args.mean, alpha=args.alpha,
                        variants=variants, confidence=args.confidence)
        text = render(with_verdicts(table, args.confidence) if args.format.startswith("cover") else table,
                      args.format)
    if args.out:
        out = Path(args.out)
        # written over only when it holds a table of this comparison (the same first line): never
        # the metrics table read, nor any other file
        if out.exists() and (out.is_dir() or out.samefile(args.metrics) or
                             _first_line(out) != (text.splitlines(keepends=True) or [""])[0]):
            raise UserError(f"{out}: exists and is not a table of this comparison; it is not overwritten: "
                            "choose another -o")
        out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0
