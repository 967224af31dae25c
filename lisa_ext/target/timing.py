"""The board's timing switch: whether the emulation modules pay for the kernel's decisions.

``faithful``: an emulated idle state's exit latency delays the woken CPU and an
emulated OPP gives the CPU ``f / f_max`` of its speed (``kernels/platform-emu/lisa_emu_cost.h``
says how); the default. ``decisions``: the tables only steer the governors, every state is a plain
halt and every OPP runs at the vCPU's speed (faster to run; the throughput, latency and energy
effects of the decisions do not show).

The switch is the ``timing`` parameter of ``lisa_emu_cpuidle`` and ``lisa_emu_cpufreq``, writable
at run time. A campaign sets it before each run from its spec's ``board-timing`` (default
``faithful``; ``lisa-ext campaign run --board-timing`` and ``study run --board-timing`` override
it) on targets that run the modules, and records what the modules report in each run's
``meta.json`` (``board_timing``, and every module parameter under ``kernel.emulation``). On a
board up by hand: ``lisa-ext vboard ssh 'echo faithful > /sys/module/lisa_emu_cpufreq/parameters/timing'``
(and the same for ``lisa_emu_cpuidle``), until its next boot: the modules load with ``decisions``.
How closely the faithful board pays the tables: docs/vboard.md#calibration.

The switch belongs to the emulation modules a target's kernel loads (a kernel variant brings them
to any Linux target), not to the QEMU board: campaigns, studies and provenance read it here
without naming the board.
"""

from __future__ import annotations

import re

from lisa_ext.target.protocol import Target

__all__ = ["DEFAULT_TIMING", "EMULATION_PARAMS_COMMAND", "MODULES", "TIMINGS", "TIMINGS_HELP",
           "emulation_params", "parse_emulation_params", "timing_knobs", "timing_of"]

TIMINGS = ("faithful", "decisions")
DEFAULT_TIMING = "faithful"
#: what each timing means, for the spec schema and the command lines that choose one
TIMINGS_HELP = ("faithful (default): exit latencies and OPP speeds paid; "
                "decisions: not paid, up to ~1.5x faster")
#: the emulation modules that have a ``timing`` parameter
MODULES = ("lisa_emu_cpuidle", "lisa_emu_cpufreq")
#: one line ``<path> <value>`` per parameter of every loaded emulation module
EMULATION_PARAMS_COMMAND = ('for f in /sys/module/lisa_emu_*/parameters/*; do [ -r "$f" ] && '
                            'echo "$f $(cat "$f")"; done')
_PARAM_LINE = re.compile(r"^/sys/module/(lisa_emu_\w+)/parameters/(\w+) ?(.*)$")


def parse_emulation_params(text: str) -> dict[str, dict[str, str]]:
    """Output of :data:`EMULATION_PARAMS_COMMAND` -> ``{module: {parameter: value}}``."""
    params: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        m = _PARAM_LINE.match(line.strip())
        if m:
            params.setdefault(m[1], {})[m[2]] = m[3].strip()
    return params


def emulation_params(target: Target) -> dict[str, dict[str, str]]:
    """The parameters of the emulation modules ``target``'s kernel has loaded (none: empty)."""
    return parse_emulation_params(target.execute(f"{EMULATION_PARAMS_COMMAND} 2>/dev/null || true", as_root=True,
                                                 check_exit_code=False))


def timing_of(emulation: dict[str, dict[str, str]] | None) -> str | None:
    """The timing the loaded modules report: one of :data:`TIMINGS`, ``"mixed"`` when they differ,
    None without modules (a target other than the board)."""
    values = {p["timing"] for p in (emulation or {}).values() if "timing" in p}
    if not values:
        return None
    return values.pop() if len(values) == 1 else "mixed"


def timing_knobs(emulation: dict[str, dict[str, str]], timing: str) -> dict[str, str]:
    """The knobs that set ``timing`` on the modules in ``emulation`` (none loaded: none)."""
    return {f"/sys/module/{module}/parameters/timing": timing
            for module in MODULES if "timing" in emulation.get(module, {})}

