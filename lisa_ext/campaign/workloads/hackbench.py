"""hackbench (rt-tests): groups of senders and receivers passing messages over pipes or sockets.

A scheduler stress test: ``groups`` x 20 senders each send ``loops`` messages
to the 20 receivers of their group. hackbench prints ``Time: <seconds>``, the
wall time of the whole exchange (lower is better).
"""

from __future__ import annotations

import re

from lisa_ext.schema import TIMEOUT_S, Field, Number
from lisa_ext.campaign.store.records import Metric
from lisa_ext.campaign.workloads.base import RunContext, Workload, WorkloadError
from lisa_ext.campaign.workloads.command import run_logged

__all__ = ["Hackbench", "parse_hackbench"]


def parse_hackbench(text: str) -> list[Metric]:
    """``time`` (s) from hackbench's ``Time: 0.797`` line."""
    m = re.search(r"^Time:\s*([0-9.]+)", text, re.M)
    if not m:
        raise WorkloadError(f"hackbench printed no 'Time:' line: {text.strip()[-200:]!r}")
    return [Metric("time", float(m.group(1)), "s", True)]



class Hackbench(Workload):
    KIND = "hackbench"
    TOOLS = ("hackbench",)
    SCHEMA = {
        "groups": Field((int,), "groups of 20 senders + 20 receivers (-g, default 10)", bounds=(1, 1_000)),
        "loops": Field((int,), "messages each sender sends (-l, default 100)", bounds=(1, 100_000_000)),
        "datasize": Field((int,), "bytes per message (-s, default 100)", bounds=(1, 1 << 20)),
        "mode": Field((str,), "process or thread (default process)",
                      check=lambda v: None if v in ("process", "thread") else "must be process or thread"),
        "pipe": Field((bool,), "use pipes instead of socketpairs (-p)"),
        "timeout-s": Field(Number, "kill hackbench after this many seconds (default 300)", bounds=TIMEOUT_S),
    }

    def command(self) -> str:
        o = self.options
        args = ["hackbench"]
        for key, flag in (("groups", "-g"), ("loops", "-l"), ("datasize", "-s")):
            if key in o:
                args.append(f"{flag} {int(o[key])}")
        if o.get("mode") == "thread":
            args.append("-T")
        if o.get("pipe"):
            args.append("-p")
        return " ".join(args)

    def run(self, ctx: RunContext) -> list[Metric]:
        stdout, _ = run_logged(ctx, self.command(), "hackbench", float(self.options.get("timeout-s", 300)),
                               "hackbench")
        return parse_hackbench(stdout)
