"""``lisa-ext bisect``: which patch of a series, or commit of a git range, made a metric worse
(:mod:`lisa_ext.bisect`)."""

from __future__ import annotations

import argparse
import sys

from lisa_ext.bisect.run import open_bisection
from lisa_ext.bisect.steps import Bounds
from lisa_ext.campaign.spec import load_spec
from lisa_ext.errors import UserError
from lisa_ext.workbench import campaign_dir

__all__ = ["register", "run"]


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bisect", help="find the patch of a series (or commit of a git range) that changed a metric",
        description="Bisect the patches the bad variant's kernel adds to the good one's: each step builds the "
                    "kernel of the first k patches, runs the workload as a campaign and calls it good or bad "
                    "against the two ends' samples, with more runs while the evidence is ambiguous; "
                    "with --variant, the same over the commits of a git range (docs/bisect.md).")
    p.add_argument("spec", metavar="SPEC", help="campaign spec holding both variants and the workload")
    p.add_argument("--good", required=True, metavar="VARIANT_OR_REF",
                   help="the variant without the regression (with --variant: a commit of its git base)")
    p.add_argument("--bad", required=True, metavar="VARIANT_OR_REF",
                   help="the variant with it: its kernel's series is the good one's plus patches (with "
                        "--variant: a later commit of the same first-parent line)")
    p.add_argument("--variant", metavar="VARIANT",
                   help="bisect the first-parent commits --good..--bad of this variant's git base instead")
    p.add_argument("--metric", required=True, metavar="METRIC",
                   help="WORKLOAD:METRIC, a workload's metric (hackbench:time), or a trace-derived one "
                        "(idle_miss:too_deep_pct, or WORKLOAD:trace too deep)")
    p.add_argument("-o", "--out", metavar="DIR", help="the bisection's directory (default: data/bisect-<spec name>)")
    p.add_argument("--resume", action="store_true", help="continue the bisection in --out")
    p.add_argument("--smoke", action="store_true", help="apply the spec's smoke: overrides")
    p.add_argument("--target", metavar="CONF", help="run on this target config instead of the spec's")
    p.add_argument("--initial", type=int, default=Bounds.initial, metavar="N",
                   help=f"runs per step before the first look (default {Bounds.initial})")
    p.add_argument("--batch", type=int, default=Bounds.batch, metavar="N",
                   help=f"runs added per look while ambiguous (default {Bounds.batch})")
    p.add_argument("--max-runs", type=int, default=Bounds.maximum, metavar="N",
                   help=f"runs per step at most, then 'undecided' (default {Bounds.maximum})")
    p.add_argument("--alpha", type=float, default=Bounds.alpha, metavar="ALPHA",
                   help=f"error rate of a step's whole sequence of looks (default {Bounds.alpha})")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def _bounds(args: argparse.Namespace) -> Bounds:
    try:
        return Bounds(args.initial, args.batch, args.max_runs, args.alpha)
    except ValueError as exc:
        raise UserError(f"--initial/--batch/--max-runs/--alpha: {exc}") from None


def run(args: argparse.Namespace) -> int:
    out = args.out or str(campaign_dir(f"bisect-{load_spec(args.spec, check_files=False).name}"))
    bisector = open_bisection(args.spec, args.good, args.bad, args.metric, out, smoke=args.smoke,
                              target=args.target, bounds=_bounds(args), resume=args.resume, variant=args.variant,
                              echo=lambda line: print(line, file=sys.stderr, flush=True),
                              progress=not args.no_progress)
    outcome = bisector.run()
    print(f"bisect: {outcome.verdict} -> {outcome.page}")
    return 0 if outcome.culprit is not None else 1
