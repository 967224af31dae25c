"""Campaign specs: the YAML file describing what to run, validated up front.

A spec names a target config, the variants to compare, the workloads, how many
iterations and which trace events to record::

    name: quickstart
    target: ../target-configs/local.yml     # relative to this file
    iterations: 3
    order: interleave                       # or group-by-variant
    retries: 1                              # when the target is lost mid-run
    board-timing: decisions                 # default faithful (the virtual board only)
    board-clock: host                       # default virtual (the virtual board only)
    trace:
      events: [sched:sched_switch, sched:sched_wakeup]
    variants:
      - name: cache
        knobs: {/sys/module/workqueue/parameters/default_affinity_scope: cache}
      - name: system
        knobs: {/sys/module/workqueue/parameters/default_affinity_scope: system}
    workloads:
      - name: fio-randread
        kind: fio
        options: {rw: randread, bs: 4k, ioengine: psync, direct: 1, runtime: 5, size: 64M}

A variant is a set of runtime knobs (sysfs/procfs files written before a run
and reverted after it) and, optionally, ``kernel:`` a kernel variant spec that
:mod:`lisa_ext.kernel.deploy` installs before the variant's runs and
``sched-ext:`` a BPF scheduler its runs load (:mod:`lisa_ext.campaign.sched_ext`).
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lisa_ext.campaign.meters import METER_KINDS
from lisa_ext.campaign.requirements import REQUIREMENTS_SCHEMA
from lisa_ext.campaign.sched_ext import SchedExtSetting, load_setting
from lisa_ext.schema import Field, check_mapping, in_bounds, load_yaml, show, text_problem
from lisa_ext.campaign.workloads import WORKLOAD_KINDS
from lisa_ext.errors import SpecError
from lisa_ext.kernel.spec import load_variant_spec
from lisa_ext.knobs import knob_problem
from lisa_ext.target import CLOCKS, CLOCKS_HELP
from lisa_ext.target.config import TargetConfig
from lisa_ext.target.timing import DEFAULT_TIMING, TIMINGS, TIMINGS_HELP

__all__ = ["ORDERS", "CampaignSpec", "TraceSpec", "VariantSpec", "WorkloadSpec", "load_spec", "merge_options",
           "stored_spec_matches"]

ORDERS = ("interleave", "group-by-variant")
#: iterations of one (variant, workload): a study runs tens; the plan of runs is built in memory
MAX_ITERATIONS = 10_000
#: runs of a campaign, variants x workloads x iterations: a study runs hundreds
MAX_RUNS = 100_000
#: trace events of a campaign and knobs of a variant: each is a word of one target command line
MAX_EVENTS = MAX_KNOBS = 1_000
#: a name becomes a directory (and a dm-crypt device's) name: short enough for both
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
_EVENT_RE = re.compile(r"^[A-Za-z0-9_]+(:[A-Za-z0-9_*]+)?\Z")


def _check_name(value: str) -> str | None:
    if not _NAME_RE.match(value):
        return (f"{show(value)} is not a valid name: use 1 to 64 letters, digits, '_', '.', '-' "
                "(it becomes a directory name)")
    return None


def _check_events(value: list) -> str | None:
    if len(value) > MAX_EVENTS:
        return f"{len(value)} events; at most {MAX_EVENTS} (each is an argument of trace-cmd)"
    for event in value:
        if not isinstance(event, str) or not _EVENT_RE.match(event):
            return (f"{event!r} is not a trace event: use 'subsystem:event', "
                    "'subsystem:*' or 'subsystem' (see trace-cmd list -e)")
    return None


def _check_knobs(value: dict) -> str | None:
    if len(value) > MAX_KNOBS:
        return f"{len(value)} knobs; at most {MAX_KNOBS} (they are read back in one target command)"
    return next(filter(None, (knob_problem(p, v) for p, v in value.items())), None)


_TOP_SCHEMA = {
    "name": Field((str,), "campaign name, used as its directory name", True, _check_name),
    "description": Field((str,), "free text", check=text_problem),
    "target": Field((str,), "path to a LISA target_conf YAML, relative to the spec", True),
    "iterations": Field((int,), "runs per (variant, workload)", True, bounds=(1, MAX_ITERATIONS)),
    "order": Field((str,), "interleave | group-by-variant",
                   check=lambda v: None if v in ORDERS else f"{v!r} is not one of: {', '.join(ORDERS)}"),
    "trace": Field((dict,), "tracing settings: events, buffer-size-kb"),
    "energy": Field((str,), "energy meter read around each run: " + " | ".join(METER_KINDS),
                    check=lambda v: None if v in METER_KINDS else f"{v!r} is not one of: {', '.join(METER_KINDS)}"),
    "variants": Field((list,), "list of variants, each with a name and knobs", True,
                      lambda v: None if v else "needs at least one variant"),
    "workloads": Field((list,), "list of workloads, each with a name and a kind", True,
                       lambda v: None if v else "needs at least one workload"),
    "retries": Field((int,), "attempts after the first when the target is lost mid-run (default 1)",
                     bounds=(0, 100)),
    "requires": Field((dict,), "what the platform must have: " + ", ".join(REQUIREMENTS_SCHEMA)),
    "board-timing": Field((str,), f"the virtual board's timing ({TIMINGS_HELP}); "
                          "ignored on targets without the emulation modules",
                          check=lambda v: None if v in TIMINGS else f"{v!r} is not one of: {', '.join(TIMINGS)}"),
    "board-clock": Field((str,), f"the virtual board's clock ({CLOCKS_HELP}); other targets run on "
                         "their own, host, and refuse virtual", check=lambda v: None if v in CLOCKS else f"{v!r} is not one of: "
                                                                                  f"{', '.join(CLOCKS)}"),
    "smoke": Field((dict,), "overrides for a smoke run (--smoke): iterations, workloads.<name>.<option>"),
    "report": Field((dict,), "how the report compares the variants: baseline, test, mean, alpha"),
    "android": Field((dict,), "keys replacing the spec's when its target is an Android device: "
                     + ", ".join(("variants", "workloads", "energy", "trace", "iterations", "requires"))),
}

#: what an ``android:`` section may replace: the rest (name, order, ...) is the study's, whatever the target
_ANDROID_KEYS = ("variants", "workloads", "energy", "trace", "iterations", "requires")

#: the report's settings a spec may fix (``lisa-ext report`` options override them; the report
#: checks their values against the statistics it knows)
_REPORT_SCHEMA = {
    "baseline": Field((str,), "the variant the others are compared with (default: the first)"),
    "test": Field((str,), "significance test: welch | mwu | ks | mmtests"),
    "mean": Field((str,), "mean to report: auto | amean | hmean | gmean"),
    "alpha": Field((int, float), "significance level, between 0 and 1",
                   check=lambda v: None if 0 < v < 1 else "must be between 0 and 1"),
}

_SMOKE_SCHEMA = {
    "iterations": Field((int,), "iterations of a smoke run", bounds=(1, MAX_ITERATIONS)),
    "workloads": Field((dict,), "per workload name: options replacing the spec's (null removes one)"),
}

_TRACE_SCHEMA = {
    "events": Field((list,), "trace events such as sched:sched_switch", True, _check_events),
    "buffer-size-kb": Field((int,), "per-CPU ring buffer size of the ftrace instance",
                            bounds=(1, 1 << 20)),
    "iterations": Field((list,), "trace only these iterations, e.g. [0] (default: all); the "
                        "others measure without tracing overhead",
                        check=lambda v: None if all(isinstance(i, int) and in_bounds(i, 0, MAX_ITERATIONS - 1)
                                                    for i in v)
                        else f"must be a list of iteration numbers (0 to {MAX_ITERATIONS - 1})"),
    "workloads": Field((list,), "trace only these workloads, by name (default: all)",
                       check=lambda v: None if all(isinstance(w, str) for w in v)
                       else "must be a list of workload names"),
}

_VARIANT_SCHEMA = {
    "name": Field((str,), "variant name, used as a directory name", True, _check_name),
    "description": Field((str,), "free text", check=text_problem),
    "knobs": Field((dict,), "mapping of /sys or /proc file -> value written before each run",
                   check=_check_knobs),
    "kernel": Field((str,), "path to a kernel variant spec (kernels/.../variant.yml), relative to the spec"),
    "sched-ext": Field((dict,), "a BPF scheduler the variant's runs load: {scheduler: scx_simple, args: [...]} "
                       "or {crate: scx_bpfland, version: '1.1.4', args: [...]} (docs/sched-ext.md)"),
    "workload-options": Field((dict,), "per workload kind, options merged (mappings key by key) into "
                              "every workload of that kind in this variant's runs, for settings that "
                              "exist only once the workload set up, e.g. "
                              "{fio: {dm-crypt: {workqueue: {affinity_strict: 1}}}}",
                              check=lambda v: None if all(k in WORKLOAD_KINDS and isinstance(o, dict)
                                                          for k, o in v.items())
                              else f"keys must be workload kinds ({', '.join(WORKLOAD_KINDS)}), "
                                   "values mappings of options"),
}

_WORKLOAD_COMMON = {
    "name": Field((str,), "workload name, used as a directory name", True, _check_name),
    "kind": Field((str,), "one of: " + ", ".join(WORKLOAD_KINDS), True,
                  lambda v: None if v in WORKLOAD_KINDS else
                  f"unknown workload kind {v!r}; allowed: {', '.join(WORKLOAD_KINDS)}"),
}


@dataclass(frozen=True)
class TraceSpec:
    events: tuple[str, ...]
    buffer_size_kb: int | None = None
    iterations: tuple[int, ...] | None = None
    workloads: tuple[str, ...] | None = None

    def traces(self, workload: str, iteration: int) -> bool:
        """Whether the run of ``workload`` at ``iteration`` is traced."""
        return ((self.iterations is None or iteration in self.iterations)
                and (self.workloads is None or workload in self.workloads))


def merge_options(options: dict, extra: dict) -> dict:
    """``options`` with ``extra`` laid over it: mappings merge key by key, other values replace."""
    merged = dict(options)
    for key, value in extra.items():
        old = merged.get(key)
        merged[key] = merge_options(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return merged


@dataclass(frozen=True)
class VariantSpec:
    name: str
    knobs: dict[str, str]
    kernel: Path | None = None
    description: str = ""
    workload_options: dict[str, dict] = field(default_factory=dict)
    """Per workload kind, options this variant lays over every workload of that kind."""
    sched_ext: SchedExtSetting | None = None
    """The BPF scheduler its runs load (``sched-ext:``), None for the kernel's own."""

    def workload(self, spec: "WorkloadSpec") -> "WorkloadSpec":
        """``spec`` as this variant runs it."""
        extra = self.workload_options.get(spec.kind)
        return replace(spec, options=merge_options(spec.options, extra)) if extra else spec


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    kind: str
    options: dict[str, Any]
    """Kind-specific options, already validated by the kind's schema."""


@dataclass(frozen=True)
class CampaignSpec:
    path: Path
    name: str
    target: Path
    iterations: int
    variants: tuple[VariantSpec, ...]
    workloads: tuple[WorkloadSpec, ...]
    trace: TraceSpec | None
    order: str = "interleave"
    description: str = ""
    energy: str = "none"
    retries: int = 1
    requires: dict[str, Any] = field(default_factory=dict)
    smoke: bool = False
    """Whether the spec's ``smoke:`` overrides were applied."""
    report: dict[str, Any] = field(default_factory=dict)
    """The report's settings (``report:``): baseline, test, mean, alpha."""
    board_timing: str = DEFAULT_TIMING
    """The virtual board's timing (:mod:`lisa_ext.target.timing`), ``board-timing:`` or the override."""
    board_clock: str | None = None
    """The clock the target is asked to run on (:attr:`lisa_ext.target.Target.clock`),
    ``board-clock:`` or the override; None for the target's default (the virtual board's is
    :data:`lisa_ext.target.DEFAULT_CLOCK`, every other target runs on its own)."""
    raw: dict = field(default_factory=dict, compare=False, repr=False)
    """The spec as plain data, as stored in the campaign directory."""

    @functools.cached_property
    def target_config(self) -> TargetConfig:
        """The spec's target config, read and checked on first use (once per spec)."""
        return TargetConfig.load(self.target)


def _plain(node: Any) -> Any:
    """ruamel's commented containers and scalar types -> plain JSON-able Python."""
    return json.loads(json.dumps(node, default=str))


def _resolve(spec_path: Path, relative: str) -> Path:
    return (spec_path.parent / relative).resolve()


def _unique(path: Path, key: str, names: list[str]) -> None:
    seen = set()
    for name in names:
        if name in seen:
            raise SpecError(path, key, f"name {name!r} is used twice; names must be unique")
        seen.add(name)


def _knob_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _check_workload(path: Path, prefix: str, node: Any) -> WorkloadSpec:
    if not isinstance(node, dict):
        raise SpecError(path, prefix, "expected a mapping with name and kind")
    kind = node.get("kind")
    kind_cls = WORKLOAD_KINDS.get(kind) if isinstance(kind, str) else None
    schema = dict(_WORKLOAD_COMMON)
    if kind_cls is not None:
        schema.update(kind_cls.SCHEMA)
    w = check_mapping(path, node, prefix, schema)
    options = {k: _plain(val) for k, val in w.items() if k not in ("name", "kind")}
    kind_cls.check_options(path, prefix, options)
    return WorkloadSpec(w["name"], w["kind"], options)


def _check_on_target(path: Path, target: Path, variants: list[VariantSpec], workloads: list[WorkloadSpec]) -> None:
    """Each workload, as each variant runs it, against the target config (read only if asked for)."""
    config = functools.cache(lambda: TargetConfig.load(target))
    for i, w in enumerate(workloads):
        kind = WORKLOAD_KINDS[w.kind]
        kind.check_target(path, f"workloads[{i}]", w.options, config)
        for j, variant in enumerate(variants):
            if w.kind in variant.workload_options:
                kind.check_target(path, f"variants[{j}].workload-options.{w.kind} on {w.name}",
                                  variant.workload(w).options, config)


def _apply_smoke(path: Path, doc: dict) -> dict:
    """``doc`` with its ``smoke:`` overrides applied (and removed): the shortest campaign that
    still fills every table cell, for CI and for checking a study end to end before a long run."""
    if "smoke" not in doc:
        raise SpecError(path, "smoke", "--smoke needs a smoke: section (iterations, "
                        "workloads.<name>.<option>) saying how to shorten this campaign")
    smoke = check_mapping(path, doc["smoke"], "smoke", _SMOKE_SCHEMA)
    doc = {k: v for k, v in doc.items() if k != "smoke"}
    if "iterations" in smoke:
        doc["iterations"] = smoke["iterations"]
        trace = doc.get("trace")
        if isinstance(trace, dict) and isinstance(trace.get("iterations"), list):
            # only numbers past the smoke run go: anything else is for the trace check to name
            doc["trace"] = dict(trace, iterations=[i for i in trace["iterations"]
                                                   if not isinstance(i, int) or i < smoke["iterations"]])
    overrides = smoke.get("workloads") or {}
    names = [w.get("name") for w in doc.get("workloads") or [] if isinstance(w, dict)]
    for name, options in overrides.items():
        if name not in names:
            raise SpecError(path, f"smoke.workloads.{name}", f"not a workload of this spec; "
                            f"allowed: {', '.join(map(str, names))}")
        if not isinstance(options, dict):
            raise SpecError(path, f"smoke.workloads.{name}", "expected a mapping of options")
    # a name that is not text is for the workload check to name
    doc["workloads"] = [_overridden(w, overrides.get(w.get("name"), {})) if isinstance(w, dict)
                        and isinstance(w.get("name"), str) else w for w in doc.get("workloads") or []]
    return doc


def _overridden(workload: dict, options: dict) -> dict:
    """A workload with a smoke run's options: a value replaces the spec's, null removes it
    (``duration-s: null, transactions: 20``: a pgbench run as long as its work)."""
    merged = {**workload, **options}
    return {k: v for k, v in merged.items() if not (k in options and options[k] is None)}


def _target_kind(target: Path) -> str | None:
    """The LISA ``kind`` a target config names (None when it cannot be read: checked later)."""
    try:
        conf = load_yaml(target, "target config")
    except (OSError, SpecError):
        return None
    return ((conf or {}).get("target-conf") or {}).get("kind") if isinstance(conf, dict) else None


def _apply_android(path: Path, doc: dict) -> dict:
    """``doc`` with its ``android:`` keys in place of its own: one study, rerun on a phone by
    switching the target config (the phone's benchmarks, meter and runtime switches)."""
    android = doc.pop("android")
    unknown = [k for k in android if k not in _ANDROID_KEYS]
    if unknown:
        raise SpecError(path, f"android.{unknown[0]}", f"cannot be replaced for Android; allowed: "
                        f"{', '.join(_ANDROID_KEYS)}")
    return {**doc, **android}


#: top-level keys that say how runs are reported or described, not what runs: a campaign may
#: change them and still resume (a new study's description is written after its first smoke run)
_REPORTING_KEYS = ("description", "report")


def stored_spec_matches(spec: CampaignSpec, stored: Any, *, legacy: bool = True) -> bool:
    """Whether ``stored`` (a campaign directory's spec copy, as data) runs what ``spec`` as
    applied runs: its smoke: overrides and target included, so a smoke campaign resumes as
    itself; its ``report:`` settings and ``description`` aside.

    ``legacy``: also accept the copy older versions kept of a smoke or ``--target`` campaign,
    the spec file as written, when applying the same overrides to it gives ``spec``.
    """
    stored = _plain(stored)
    if not isinstance(stored, dict):
        return False
    raw = {k: v for k, v in spec.raw.items() if k not in _REPORTING_KEYS}
    stored = {k: v for k, v in stored.items() if k not in _REPORTING_KEYS}
    if stored == raw:
        return True
    if not legacy:
        return False
    try:
        applied = _apply_smoke(spec.path, stored) if spec.smoke and "smoke" in stored else stored
    except SpecError:
        return False

    def target(doc: dict) -> Path | None:
        return _resolve(spec.path, doc["target"]) if isinstance(doc.get("target"), str) else None

    return ({**applied, "target": None} == {**raw, "target": None} and target(applied) == target(raw))


def load_spec(path: str | os.PathLike, *, check_files: bool = True, smoke: bool = False,
              target: str | os.PathLike | None = None, board_timing: str | None = None,
              board_clock: str | None = None) -> CampaignSpec:
    """Read and validate a campaign spec; any problem raises one :class:`SpecError`.

    ``check_files=False`` skips the checks that referenced files exist, to read
    back the copy stored in a campaign directory. ``smoke=True`` applies the spec's
    ``smoke:`` overrides; ``target`` replaces its ``target:`` (rerunning a study on
    another platform is this one parameter); ``board_timing`` its ``board-timing:``, ``board_clock``
    its ``board-clock:``.
    """
    if board_timing is not None and board_timing not in TIMINGS:
        raise SpecError(Path(path), "board-timing", f"{board_timing!r} is not one of: {', '.join(TIMINGS)}")
    if board_clock is not None and board_clock not in CLOCKS:
        raise SpecError(Path(path), "board-clock", f"{board_clock!r} is not one of: {', '.join(CLOCKS)}")
    path = Path(path).resolve()
    doc = load_yaml(path, "campaign spec")
    top = check_mapping(path, doc, "", _TOP_SCHEMA)
    if smoke:
        doc = _apply_smoke(path, _plain(doc))
        top = check_mapping(path, doc, "", _TOP_SCHEMA)
    if target is not None:
        doc = dict(_plain(doc), target=str(Path(target).resolve()))
        top = check_mapping(path, doc, "", _TOP_SCHEMA)
    if "android" in top and _target_kind(_resolve(path, top["target"])) == "android":
        doc = _apply_android(path, _plain(doc))
        top = check_mapping(path, doc, "", _TOP_SCHEMA)

    target = _resolve(path, top["target"])
    if check_files and not target.is_file():
        raise SpecError(path, "target", f"target config {target} not found (a LISA target_conf YAML file)")
    requires = check_mapping(path, top["requires"], "requires", REQUIREMENTS_SCHEMA) if "requires" in top else {}

    trace = None
    if "trace" in top:
        t = check_mapping(path, top["trace"], "trace", _TRACE_SCHEMA)
        trace = TraceSpec(
            tuple(str(e) for e in t["events"]), t.get("buffer-size-kb"),
            tuple(int(i) for i in t["iterations"]) if "iterations" in t else None,
            tuple(str(w) for w in t["workloads"]) if "workloads" in t else None)

    variants = []
    for i, node in enumerate(top["variants"]):
        v = check_mapping(path, node, f"variants[{i}]", _VARIANT_SCHEMA)
        kernel = None
        if "kernel" in v:
            kernel = _resolve(path, v["kernel"])
            if check_files and not kernel.is_file():
                raise SpecError(path, f"variants[{i}].kernel", f"kernel variant spec {kernel} not found")
            if check_files:
                # before anything runs: its problems would otherwise surface at the variant's deploy
                load_variant_spec(kernel)
        knobs = {str(k): _knob_text(val) for k, val in (v.get("knobs") or {}).items()}
        sched_ext = None
        if "sched-ext" in v:
            sched_ext = load_setting(path, f"variants[{i}].sched-ext", v["sched-ext"], kernel if check_files else None)
        variants.append(VariantSpec(v["name"], knobs, kernel, str(v.get("description", "")),
                                    _plain(v.get("workload-options") or {}), sched_ext))
    _unique(path, "variants", [v.name for v in variants])

    workloads = [_check_workload(path, f"workloads[{i}]", node) for i, node in enumerate(top["workloads"])]
    _unique(path, "workloads", [w.name for w in workloads])
    for i, variant in enumerate(variants):
        for w in workloads:
            if w.kind in variant.workload_options:
                _check_workload(path, f"variants[{i}].workload-options.{w.kind} on {w.name}",
                                {"name": w.name, "kind": w.kind, **variant.workload(w).options})
    if check_files:
        _check_on_target(path, target, variants, workloads)
    report = check_mapping(path, top["report"], "report", _REPORT_SCHEMA) if "report" in top else {}
    if "baseline" in report and report["baseline"] not in {v.name for v in variants}:
        raise SpecError(path, "report.baseline", f"{report['baseline']!r} is not a variant of this spec; "
                        f"allowed: {', '.join(v.name for v in variants)}")
    if trace is not None and trace.workloads is not None:
        for name in trace.workloads:
            if name not in {w.name for w in workloads}:
                raise SpecError(path, "trace.workloads", f"{name!r} is not a workload of this spec; "
                                f"allowed: {', '.join(w.name for w in workloads)}")

    runs = len(variants) * len(workloads) * top["iterations"]
    if runs > MAX_RUNS:
        raise SpecError(path, "iterations", f"{len(variants)} variants x {len(workloads)} workloads x "
                        f"{top['iterations']} iterations is {runs} runs; a campaign has at most {MAX_RUNS}")
    return CampaignSpec(
        path=path,
        name=top["name"],
        target=target,
        iterations=top["iterations"],
        variants=tuple(variants),
        workloads=tuple(workloads),
        trace=trace,
        order=top.get("order", "interleave"),
        description=str(top.get("description", "")),
        energy=top.get("energy", "none"),
        retries=top.get("retries", 1),
        requires=requires,
        smoke=smoke,
        report=_plain(report),
        board_timing=board_timing or top.get("board-timing", DEFAULT_TIMING),
        board_clock=board_clock or top.get("board-clock"),
        raw=_plain(doc),
    )
