"""What a study needs from its platform, checked on the target before it runs.

A campaign spec may say what its comparison needs::

    requires:
      cpuidle-states: 2              # idle states of cpu0 (drivers/cpuidle/sysfs.c: cpuN/cpuidle/stateK)
      llc-domains: 2                 # distinct last-level caches (drivers/base/cacheinfo.c: shared_cpu_list)
      cpufreq-governors: [ondemand]  # in policy0's scaling_available_governors (drivers/cpufreq/cpufreq.c)
      capacity-classes: 2            # distinct CPU capacities (cpuN/cpu_capacity, drivers/base/arch_topology.c)
      energy-aware: true             # EAS can run: /proc/sys/kernel/sched_energy_aware reads a value
                                     # (kernel/sched/topology.c gives nothing while EAS is impossible)

A workqueue-affinity study on a machine with one L3, or an idle-governor study on a
target without idle states, would print a table of noise; the runner refuses instead,
naming what is missing and what the platform has.
"""

from __future__ import annotations

import re
from typing import Any

from lisa_ext.errors import UserError
from lisa_ext.schema import Field
from lisa_ext.target import llc_domains

__all__ = ["REQUIREMENTS_SCHEMA", "RequirementError", "platform_facts", "unmet_requirements"]

REQUIREMENTS_SCHEMA = {
    # a cpuidle driver has at most CPUIDLE_STATE_MAX (10) states (include/linux/cpuidle.h)
    "cpuidle-states": Field((int,), "minimum number of idle states of cpu0 (state0 included)",
                            bounds=(1, 10)),
    "llc-domains": Field((int,), "minimum number of distinct last-level caches", bounds=(1, 4096)),
    "cpufreq-governors": Field((list,), "cpufreq governors policy0 must offer",
                               check=lambda v: None if v and all(isinstance(g, str) and re.fullmatch(
                                   r"[a-z0-9_]{1,15}", g) for g in v)
                               else "must be a non-empty list of governor names (a-z, 0-9, _)"),
    "capacity-classes": Field((int,), "minimum number of distinct CPU capacities (2: big.LITTLE)",
                              bounds=(1, 4096)),
    "energy-aware": Field((bool,), "energy-aware scheduling must be possible (asymmetric capacities, an "
                          "Energy Model, schedutil, frequency invariance)"),
}

_SYS_CPU = "/sys/devices/system/cpu"

# One shell round trip: over SSH to a phone or a TCG guest each call costs ~0.1-1 s.
_PROBE = (
    f"echo states $(ls -d {_SYS_CPU}/cpu0/cpuidle/state* 2>/dev/null | wc -l); "
    f"echo governors $(cat {_SYS_CPU}/cpufreq/policy0/scaling_available_governors 2>/dev/null); "
    f"echo capacities $(cat {_SYS_CPU}/cpu[0-9]*/cpu_capacity 2>/dev/null | sort -u | wc -l); "
    "echo eas $(cat /proc/sys/kernel/sched_energy_aware 2>/dev/null)"
)


class RequirementError(UserError):
    """The platform lacks what the campaign's ``requires:`` names."""


def platform_facts(target: Any) -> dict[str, Any]:
    """``{"cpuidle-states": int, "llc-domains": int, "cpufreq-governors": [str], "capacity-classes": int,
    "energy-aware": bool}`` read on ``target``."""
    out = target.execute(_PROBE, check_exit_code=False)
    facts: dict[str, Any] = {"cpuidle-states": 0, "llc-domains": len(llc_domains(target)),
                             "cpufreq-governors": [], "capacity-classes": 1, "energy-aware": False}
    for line in out.splitlines():
        key, _, rest = line.partition(" ")
        if key == "states":
            facts["cpuidle-states"] = int(rest or 0)
        elif key == "governors":
            facts["cpufreq-governors"] = rest.split()
        elif key == "capacities":
            facts["capacity-classes"] = max(int(rest or 0), 1)
        elif key == "eas":
            facts["energy-aware"] = rest.strip() in ("0", "1")
    return facts


def unmet_requirements(requires: dict[str, Any], facts: dict[str, Any]) -> list[str]:
    """One sentence per requirement ``facts`` (from :func:`platform_facts`) do not meet."""
    problems = []
    if facts["cpuidle-states"] < requires.get("cpuidle-states", 0):
        problems.append(f"needs at least {requires['cpuidle-states']} idle states on cpu0, the target has "
                        f"{facts['cpuidle-states']} (no cpuidle driver with states?)")
    if facts["llc-domains"] < requires.get("llc-domains", 0):
        problems.append(f"needs at least {requires['llc-domains']} last-level caches, the target has "
                        f"{facts['llc-domains']} (every CPU shares one: cache and system scopes are the same)")
    if facts.get("capacity-classes", 1) < requires.get("capacity-classes", 0):
        problems.append(f"needs at least {requires['capacity-classes']} CPU capacity classes, the target has "
                        f"{facts.get('capacity-classes', 1)} (symmetric CPUs: run it on the arm64 board)")
    if requires.get("energy-aware") and not facts.get("energy-aware"):
        problems.append("needs energy-aware scheduling, which the target's kernel cannot run "
                        "(/proc/sys/kernel/sched_energy_aware is empty: no asymmetric capacities, Energy "
                        "Model, schedutil or frequency invariance)")
    missing = [g for g in requires.get("cpufreq-governors", []) if g not in facts["cpufreq-governors"]]
    if missing:
        offered = " ".join(facts["cpufreq-governors"]) or "none (no cpufreq driver)"
        problems.append(f"needs cpufreq governor(s) {', '.join(missing)}; policy0 offers: {offered}")
    return problems
