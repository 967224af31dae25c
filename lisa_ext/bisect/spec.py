"""What a bisection bisects: the patch series between two kernel variants, the metric, and the
specs of each step's kernel and campaign, written into the bisection's directory.

The bad variant's kernel must be the good one's with patches p1..pn appended: the same base
tree, config fragments and architecture, and the good series (by content) a prefix of the bad
one. Step k's kernel is the good spec with p1..pk added; its patches and fragments are copied
into the bisection's directory under their own names (the build hash covers names and bytes, so
the ends reuse the variants' cached builds) and the spec lies beside them, where the kernel
spec's rule that inputs lie in the spec's tree holds wherever the patches came from.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from lisa_ext.campaign.spec import CampaignSpec
from lisa_ext.campaign.spec import VariantSpec as CampaignVariant
from lisa_ext.errors import UserError
from lisa_ext.kernel.spec import VariantSpec, load_variant_spec
from lisa_ext.schema import show

__all__ = ["MetricChoice", "Series", "campaign_doc", "digest", "kernel_doc", "metric_matches", "parse_metric",
           "patch_subject", "series_between", "step_name", "write_step_kernel", "write_yaml"]

#: how much of a patch is read for its subject line
_SUBJECT_SCAN_BYTES = 64 * 1024
_SUBJECT_MAX = 200
#: a mail's subject, folded over continuation lines (RFC 5322), without its ``[PATCH ...]`` tag
_SUBJECT_RE = re.compile(r"^Subject:\s*(?:\[[^\]]*\]\s*)?(.*(?:\n[ \t].*)*)", re.M)


@dataclass(frozen=True)
class Series:
    """The good kernel, the bad one, and the patches the bad one adds (p1..pn), each named on the
    page and in progress by ``labels``. A git range's series (:mod:`lisa_ext.bisect.git_range`)
    has its ``commits`` (full hashes, p_k exported from commit k) and applies the variant's own
    patches ``after`` them, as the variant at commit k would."""

    good: VariantSpec
    bad: VariantSpec
    added: tuple[Path, ...]
    labels: tuple[str, ...]
    after: tuple[Path, ...] = ()
    commits: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        return len(self.added)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _describe(spec: VariantSpec) -> str:
    return f"{spec.path} ({spec.name})"


def series_between(good: VariantSpec, bad: VariantSpec) -> Series:
    """The patches ``bad`` adds to ``good``; one clear line when the two are not a series and its
    prefix (other base, fragments or architecture, or a good patch the bad series lacks)."""
    for what, a, b in (("base tree", good.base, bad.base), ("config fragments",
                                                             [digest(p) for p in good.configs],
                                                             [digest(p) for p in bad.configs]),
                       ("architecture", good.arch, bad.arch)):
        if a != b:
            raise UserError(f"{_describe(bad)}: its {what} differs from {_describe(good)}'s; bisect needs the bad "
                            "kernel to be the good one plus patches")
    good_sums, bad_sums = [digest(p) for p in good.patches], [digest(p) for p in bad.patches]
    shared = next((i for i, (a, b) in enumerate(zip(good_sums, bad_sums)) if a != b),
                  min(len(good_sums), len(bad_sums)))
    if shared < len(good_sums):
        raise UserError(f"{_describe(bad)}: patches[{shared}] ({show(bad.patches[shared].name) if shared < len(bad.patches) else 'none'}) "
                        f"differs from {_describe(good)}'s patches[{shared}] ({show(good.patches[shared].name)}): "
                        "the two series share no prefix; bisect needs the bad series to be the good one plus patches")
    if len(bad_sums) == shared:
        raise UserError(f"{_describe(bad)}: adds no patch to {_describe(good)}: nothing to bisect")
    added = tuple(bad.patches[shared:])
    return Series(good, bad, added, tuple(patch_subject(p) for p in added))


def patch_subject(path: Path) -> str:
    """A patch's subject (its mail's ``Subject:`` without the ``[PATCH ...]`` tag), else its first
    line, else its file name; one line, bounded."""
    with open(path, "rb") as f:
        text = f.read(_SUBJECT_SCAN_BYTES).decode("utf-8", "replace")
    m = _SUBJECT_RE.search(text)
    line = m.group(1) if m else next((ln for ln in text.splitlines() if ln.strip()), path.name)
    line = " ".join(line.split())
    return line[:_SUBJECT_MAX] or path.name


@dataclass(frozen=True)
class MetricChoice:
    """``WORKLOAD:METRIC`` as run: the workload whose runs carry it and the metric's name in the
    metrics table; ``trace`` when it is derived from the runs' traces."""

    workload: str
    metric: str
    trace: bool

    @property
    def label(self) -> str:
        return f"{self.workload}:{self.metric}"


def _words(name: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", name.lower()).split())


def parse_metric(text: str, workloads: list[str], analyses: list[str]) -> tuple[str, str, bool]:
    """``WORKLOAD:METRIC`` -> (workload, metric, trace). A metric of ``trace ...`` is trace-derived;
    ``ANALYSIS:NAME`` (an analysis, e.g. ``idle_miss:too_deep_pct``) names a trace-derived
    metric of the campaign's one workload, matched by :func:`metric_matches`."""
    if ":" not in text:
        raise UserError(f"--metric {show(text)}: expected WORKLOAD:METRIC or ANALYSIS:METRIC")
    head, name = text.split(":", 1)
    if not head or not name:
        raise UserError(f"--metric {show(text)}: expected WORKLOAD:METRIC or ANALYSIS:METRIC")
    if head in workloads:
        return head, name, name.startswith("trace ")
    if head in analyses or head.replace("-", "_") in analyses:
        if len(workloads) != 1:
            raise UserError(f"--metric {show(text)}: a trace metric names the workload when the spec has "
                            f"several: WORKLOAD:trace NAME (workloads: {', '.join(workloads)})")
        return workloads[0], name, True
    raise UserError(f"--metric {show(text)}: {show(head)} is neither a workload of the spec "
                    f"({', '.join(workloads)}) nor an analysis ({', '.join(analyses)})")


def metric_matches(asked: str, name: str, unit: str) -> bool:
    """Whether the metrics table's ``name`` (``trace too deep``, unit ``%``) is the metric asked
    for (``trace too deep``, ``too deep``, ``too_deep`` or ``too_deep_pct``)."""
    want, have = _words(asked), _words(name)
    if have.startswith("trace "):
        have = have[len("trace "):]
        want = want[len("trace "):] if want.startswith("trace ") else want
        return want == have or (unit == "%" and want == f"{have} pct")
    return asked == name


def step_name(k: int) -> str:
    return f"k{k}"


def kernel_doc(series: Series, k: int, inputs: list[str], configs: list[str]) -> dict[str, Any]:
    """The kernel variant spec of step ``k`` as data, for the good spec's architecture, with
    ``inputs`` / ``configs`` the paths (relative to the spec) of its copied patches / fragments."""
    good = series.good
    base: Any
    if good.base.kind == "debian":
        base = {"debian": good.base.location}
    elif good.base.kind == "dir":
        base = {"dir": good.base.location}
    else:
        base = {"git": good.base.location, "ref": good.base.ref}
    if series.commits:
        description = (f"{good.name} at {good.base.ref} + the first {k} of the {series.n} first-parent commits "
                       f"up to {series.commits[-1]}")
    else:
        description = f"{good.name} + the first {k} of the {series.n} patches {series.bad.name} adds"
    doc: dict[str, Any] = {
        "name": step_name(k),
        "description": description,
        "base": base, "arch": good.arch, "patches": inputs, "configs": configs,
        "cmdline": good.cmdline,
        "modules": [{"name": m.name, "params": dict(m.params)} if m.params else {"name": m.name}
                    for m in good.modules],
        "knobs": dict(good.knobs),
    }
    return doc


def write_yaml(path: Path, doc: Any) -> None:
    """Write ``doc`` (plain data, or as a YAML reader gave it) as YAML: the bisection's own spec
    files; runs go through the store."""
    doc = json.loads(json.dumps(doc))  # plain types only: the safe dumper refuses a reader's own
    out = io.StringIO()
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False
    yaml.dump(doc, out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(out.getvalue(), encoding="utf-8")
    tmp.replace(path)


def _copy_input(src: Path, inputs: Path, index: int, kind: str) -> Path:
    dest = inputs / f"{kind}-{index:03d}" / src.name
    if not dest.is_file() or digest(dest) != digest(src):
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
    return dest


def write_step_kernel(series: Series, k: int, directory: Path) -> Path:
    """Write step ``k``'s kernel spec (and copy its inputs) under ``directory``; return its path,
    checked by the kernel spec loader."""
    inputs = directory / "inputs"
    spec_dir = directory / "kernels"
    patches = [*series.good.patches, *series.added[:k], *series.after]
    copied = [_copy_input(p, inputs, i, "patch") for i, p in enumerate(patches)]
    frags = [_copy_input(p, inputs, i, "config") for i, p in enumerate(series.good.configs)]
    path = spec_dir / f"{step_name(k)}.yml"
    rel = [f"../{p.relative_to(directory).as_posix()}" for p in copied]
    rel_cfg = [f"../{p.relative_to(directory).as_posix()}" for p in frags]
    write_yaml(path, kernel_doc(series, k, rel, rel_cfg))
    load_variant_spec(path)
    return path


def campaign_doc(spec: CampaignSpec, variant: CampaignVariant, workload: str, name: str, step: str,
                 kernel: str, iterations: int) -> dict[str, Any]:
    """A campaign of one variant (the step's kernel with ``variant``'s knobs) and one workload,
    otherwise ``spec`` as applied (target, trace, timing, requirements)."""
    raw = dict(spec.raw)
    keep = {k: v for k, v in raw.items()
            if k not in ("name", "description", "variants", "workloads", "iterations", "order", "report",
                         "smoke", "target")}
    raw_variant = next(v for v in raw["variants"] if v.get("name") == variant.name)
    step_variant = {k: v for k, v in raw_variant.items() if k not in ("name", "kernel", "description")}
    return {
        "name": name,
        "description": f"bisection step {step} of {spec.name}",
        "target": str(spec.target),
        **keep,
        "iterations": iterations,
        "order": "group-by-variant",
        "variants": [{"name": step, "kernel": kernel, **step_variant}],
        "workloads": [w for w in raw["workloads"] if w.get("name") == workload],
    }
