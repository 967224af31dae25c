"""``lisa-ext report CAMPAIGN_DIR``: tables and figures for a campaign."""

from __future__ import annotations

import argparse

from lisa_ext.report.build import ReportOptions, build_report
from lisa_ext.schema import jobs_argument
from lisa_ext.trace.cluster import add_scheduler_argument

__all__ = ["register", "run"]


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="write tables and figures for a campaign",
        description="Gather a campaign's workload metrics and trace analyses into one "
                    "metrics table, compare the variants and write tables (mmtests, "
                    "Markdown, LKP, ±, CSV) and figures (PNG, SVG, HTML) to "
                    "CAMPAIGN_DIR/report/.")
    p.add_argument("campaign_dir", metavar="CAMPAIGN_DIR", help="e.g. data/<campaign>")
    p.add_argument("--baseline", metavar="VARIANT",
                   help="variant to compare with (default: the spec's report: baseline, else the "
                        "campaign's first variant)")
    p.add_argument("--test", choices=("welch", "mwu", "ks", "mmtests"),
                   help="significance test (default: the spec's report: test, else welch)")
    p.add_argument("--mean", choices=("auto", "amean", "hmean", "gmean"),
                   help="mean to report; auto = hmean when higher is better, else amean "
                        "(default: the spec's report: mean, else auto)")
    p.add_argument("--alpha", type=float, metavar="ALPHA",
                   help="significance level (default: the spec's report: alpha, else 0.05)")
    p.add_argument("--no-traces", dest="traces", action="store_false",
                   help="ignore trace.dat files (faster)")
    p.add_argument("--no-html", dest="html", action="store_false",
                   help="skip the interactive figures.html")
    p.add_argument("--jobs", type=jobs_argument, metavar="N",
                   help="processes drawing the figures not cached yet (default: one per CPU)")
    p.add_argument("--no-cache", dest="cache", action="store_false",
                   help="draw every figure and analyse every trace again, ignoring "
                        "$LISA_EXT_CACHE/report (default ~/.cache/lisa-ext/report)")
    p.add_argument("-o", "--out", metavar="DIR",
                   help="write the report here instead of CAMPAIGN_DIR/report: a new or empty "
                        "directory, or an earlier report (replaced whole); anything else is refused")
    add_scheduler_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    opts = ReportOptions(baseline=args.baseline, test=args.test, mean=args.mean,
                         alpha=args.alpha, traces=args.traces, html=args.html, out=args.out,
                         jobs=args.jobs, cache=args.cache,
                         scheduler=args.scheduler)
    out = build_report(args.campaign_dir, opts)
    print(f"report written to {out}/ (README.md, comparison.*, figures/)")
    return 0
