"""``lisa-ext kernel check|build VARIANT.yml``, ``lisa-ext kernel status SPEC``."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from lisa_ext.kernel.build import BuildStatus, build_env, build_status, build_variant, resolve_config
from lisa_ext.kernel.spec import ARCHES, load_variant_spec
from lisa_ext.schema import jobs_argument, load_yaml
from lisa_ext.workbench import shown_path
from lisa_ext.kernel.tree import KernelTree, prepare_tree

__all__ = ["register"]


def _check(args: argparse.Namespace) -> int:
    status = 0
    for path in args.variants:
        spec = load_variant_spec(path, arch=args.arch)
        print(f"{path}: ok: variant {spec.name!r} ({spec.arch}), base {spec.base.kind}:{spec.base.location}"
              f"{' @ ' + spec.base.ref if spec.base.ref else ''}, {len(spec.patches)} patch(es), "
              f"{len(spec.configs)} config fragment(s), {len(spec.modules)} module(s), {len(spec.knobs)} knob(s)")
        if args.kconfig:
            status |= _check_kconfig(spec)
    return status


def _check_kconfig(spec) -> int:
    """Resolve the config in a scratch build dir (patches not applied) and report misses."""
    tree = prepare_tree(spec.base)
    with tempfile.TemporaryDirectory(prefix="lisa-ext-kconfig-") as tmp:
        scratch = KernelTree(tree.key, Path(tmp))
        (scratch.root / "src").symlink_to(tree.src)
        log_path = scratch.root / "kconfig.log"
        with tree.locked(), open(log_path, "w") as log_file:
            misses = resolve_config(spec, scratch, spec.arch, log_file, build_env(), log_path)
    for m in misses:
        print(f"  config option did not take effect: {m}")
    if not misses:
        print(f"  all {sum(1 for _ in spec.configs)} fragment(s) fully honoured by kconfig")
    return 1 if misses else 0


def _build(args: argparse.Namespace) -> int:
    log = (lambda *a, **k: print(*a, file=sys.stderr, **k)) if args.json else print
    art = build_variant(args.variant, jobs=args.jobs, force=args.force, log=log, arch=args.arch)
    if args.json:
        d = asdict(art)
        print(json.dumps(d, indent=2, default=str))
        return 0
    print(f"variant {art.name}: {'cached' if art.cached else 'built'} ({art.hash[:12]})")
    print(f"  directory      {art.directory}")
    print(f"  {art.image.name:<14} {art.image} ({art.arch})")
    if art.dtbs:
        print(f"  SoC dtbs       {art.dtbs}")
    print(f"  modules        {art.modules_dir}/lib/modules/{art.release}")
    print(f"  .config        {art.config}")
    print(f"  build log      {art.build_log}")
    print(f"  release        {art.release}")
    print(f"  uname -v       {art.version_string}")
    print(f"  build id       {art.build_id}")
    print(f"  cmdline        {art.cmdline or '(none)'}")
    for m in art.modules:
        print(f"  load module    {' '.join(m.modprobe_args())}")
    for k, v in art.knobs:
        print(f"  knob           {k} = {v}")
    for miss in art.config_not_taken:
        print(f"  warning: config option did not take effect: {miss}")
    return 0


def _label(variant: str, spec_path: Path) -> str:
    """A row of ``kernel status``: the variant and its spec file, since variants of different
    studies share names (every study has a ``baseline``)."""
    return f"{variant} ({shown_path(spec_path)})"


def _built_for(st: BuildStatus) -> str:
    """Which variant's build a cached one is, when another spec made it: by its name and spec
    file, since a ``baseline`` of one study is not another's."""
    if st.built_by is None:
        return ""
    if st.built_by_spec is None:  # a build recorded before the cache kept its spec
        return f" for {st.built_by}" if st.built_by != st.name else ""
    if st.built_by_spec.resolve() == Path(st.spec_path).resolve():
        return ""
    return f" for {_label(st.built_by, st.built_by_spec)}"


def _variant_specs(path: str) -> list[tuple[str, Path]]:
    """(label, kernel variant spec) of a campaign spec's variants, or of one kernel variant spec."""
    doc = load_yaml(Path(path), "spec")
    if isinstance(doc, dict) and "variants" in doc and "workloads" in doc:
        # deferred: only a campaign spec needs the campaign layer
        from lisa_ext.campaign.spec import load_spec as load_campaign

        campaign = load_campaign(path)
        found = [(_label(f"{campaign.name}/{v.name}", v.kernel), v.kernel)
                 for v in campaign.variants if v.kernel is not None]
        if not found:
            print(f"{path}: no variant names a kernel: the campaign runs on the target's own kernel "
                  "(knobs only), nothing to build")
        return found
    return [(_label(load_variant_spec(path).name, Path(path)), Path(path))]


def _status(args: argparse.Namespace) -> int:
    rows = []
    for path in args.specs:
        for label, spec_path in _variant_specs(path):
            rows.append((label, build_status(spec_path)))
    by_hash: dict[str, list[str]] = {}
    for label, st in rows:
        if st.hash:
            by_hash.setdefault(st.hash, []).append(label)
    width = max((len(label) for label, _ in rows), default=0)
    missing = 0
    for label, st in rows:
        if st.hash is None:
            print(f"{label:<{width}}  unknown: {st.reason}")
            missing += 1
            continue
        shared = [other for other in by_hash[st.hash] if other != label]
        share = f"; one build with {', '.join(shared)}" if shared else ""
        if st.built:
            print(f"{label:<{width}}  built {st.hash[:12]}{_built_for(st)}{share}")
        else:
            missing += 1
            print(f"{label:<{width}}  not built {st.hash[:12]}{share}: lisa-ext kernel build {shown_path(st.spec_path)}")
    return 1 if missing else 0


def register(subparsers) -> None:
    p = subparsers.add_parser("kernel", help="check and build kernel variants",
                              description="Kernel variant specs (kernels/<study>/<variant>.yml): validate and build.")
    sub = p.add_subparsers(dest="kernel_command", metavar="ACTION")
    sub.required = True
    c = sub.add_parser("check", help="validate variant specs without building",
                       description="Validate kernel variant specs (source, patches, config "
                                   "fragments, knobs) without building.")
    c.add_argument("variants", nargs="+", metavar="VARIANT",
                   help="kernel variant spec (kernels/<study>/<variant>.yml)")
    c.add_argument("--arch", choices=ARCHES, help="check the spec as built for this architecture "
                   "(default: the spec's own)")
    c.add_argument("--kconfig", action="store_true",
                   help="also resolve the config fragments with kconfig and report options that do not take effect")
    c.set_defaults(func=_check)
    b = sub.add_parser("build", help="build a variant (or reuse the cached build) and print where the artefacts are",
                       description="Build a kernel variant, or reuse its cached build, and print "
                                   "where its artefacts are.")
    b.add_argument("variant", metavar="VARIANT", help="kernel variant spec (kernels/<study>/<variant>.yml)")
    b.add_argument("-j", "--jobs", type=jobs_argument, default=None, metavar="N", help="parallel make jobs (default: CPU count)")
    b.add_argument("--force", action="store_true", help="rebuild even when the cache has the artefacts")
    b.add_argument("--arch", choices=ARCHES, help="build for this architecture (x86_64: bzImage; arm64: Image, "
                   "cross-compiled; default: the spec's own)")
    b.add_argument("--json", action="store_true", help="print the artefacts as JSON")
    b.set_defaults(func=_build)
    st = sub.add_parser("status", help="whether each kernel variant is built, and which build it shares",
                        description="For a campaign spec (its variants' kernels) or kernel variant specs: "
                                    "whether the build is in the cache, without building or fetching. "
                                    "The build hash covers the base tree, patches, config fragments and "
                                    "emulation modules, not cmdline, knobs or modules to load: variants "
                                    "differing only there share one build. Exit status 1 when any is "
                                    "not built.")
    st.add_argument("specs", nargs="+", metavar="SPEC",
                    help="campaign spec (notebooks/<study>.yml) or kernel variant spec")
    st.set_defaults(func=_status)
