"""``lisa-ext compare``: compare variants of a metrics table and print a table.

A command module is an orchestrator: it may use the report layer's renderers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lisa_ext.errors import UserError
from lisa_ext.report.tables import render
from lisa_ext.stats.compare import compare
from lisa_ext.stats.cover import with_verdicts
from lisa_ext.stats.metrics import read_metrics

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
    p.add_argument("-o", "--out", metavar="FILE", help="write the table here instead of stdout")
    p.set_defaults(func=run)


def _first_line(path: Path) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.readline(4096)


def run(args: argparse.Namespace) -> int:
    metrics = read_metrics(args.metrics)
    if args.workload:
        unknown = sorted(set(args.workload) - set(metrics["workload"]))
        if unknown:
            raise UserError(f"{args.metrics}: no workload {', '.join(unknown)}; workloads are: "
                            f"{', '.join(dict.fromkeys(metrics['workload']))}")
        metrics = metrics[metrics["workload"].isin(args.workload)]
    if metrics.empty:
        raise UserError(f"{args.metrics}: the metrics table has no rows")
    variants = [v for v in args.variants.split(",") if v] if args.variants else None
    if not 0 < args.confidence < 1:
        raise UserError(f"--confidence must be between 0 and 1, got {args.confidence}")
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
