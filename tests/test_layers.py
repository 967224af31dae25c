"""The layering lisa_ext's docstring states is the one its imports follow.

`.importlinter` lists the layers (command modules on top, errors at the bottom); import-linter
builds the import graph of the package - function-level imports included - and fails on any
import that runs back up, naming the chain. A new module directly under ``lisa_ext`` or
``lisa_ext.campaign`` fails too until it is given its layer there. Outside ``lisa_ext.target`` no
module imports the virtual board's package or a target implementation (the protected contracts)
nor branches on a kind of target: what differs between kinds is asked of the target.
"""

from __future__ import annotations

import ast
import configparser
import importlib.machinery
import os
import re
import subprocess
import sys
from pathlib import Path

import lisa_ext

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _exists(container: str, name: str) -> bool:
    base = ROOT.joinpath(*container.split("."), name)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _layers(contract: str, container: str) -> list[str]:
    """The layers of one contract in .importlinter, optional ones only when their module exists."""
    config = (ROOT / ".importlinter").read_text()
    section = config.split(f"[importlinter:contract:{contract}]", 1)[1].split("[importlinter:", 1)[0]
    lines = section.split("layers =", 1)[1].split("ignore_imports", 1)[0].splitlines()
    layers = []
    for line in filter(None, (line.strip() for line in lines)):
        names = [n.strip() for n in line.split("|")]
        names = [n.strip("()") for n in names if not n.startswith("(") or _exists(container, n.strip("()"))]
        if names:
            layers.append(" | ".join(names))
    return layers


def test_imports_follow_the_layers():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / ".importlinter"), "--no-cache"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_package_docstring_states_the_contract():
    """The layers in lisa_ext/__init__.py's docstring are the contract's, in its order."""
    contract = _layers("packages", "lisa_ext")
    doc = lisa_ext.__doc__ or ""
    diagram = re.search(r"::\n\n(.*?)\n\n", doc, re.S)
    assert diagram, "lisa_ext.__doc__ has no layer diagram (a literal block after '::')"
    stated = [re.sub(r"\s+#.*$", "", line).strip() for line in diagram.group(1).splitlines()]
    assert [s for s in stated if s] == contract


def test_package_docstring_states_the_campaign_layers():
    contract = " > ".join(_layers("campaign", "lisa_ext.campaign"))
    assert contract in " ".join((lisa_ext.__doc__ or "").split())


# -- imports by name, and cycles ---------------------------------------------------------------

#: functions that import a module named by a string
_IMPORTERS = {"import_module", "__import__", "find_spec", "resolve_name"}
_MODULE_FUNCTION = re.compile(r"^(lisa_ext(?:\.\w+)+):\w+$")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            ids.add(id(body[0].value))
    return ids


def string_imports(source: str, module: str, modules: set[str]) -> set[tuple[str, str]]:
    """(module, imported) for every import ``source`` makes by name: a string naming a lisa_ext
    module given to an import function, a ``'package.module:function'`` string, and, in a module
    that calls an import function on a computed name, every string naming a lisa_ext module
    (the table the name comes from)."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    strings = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
               and id(n) not in docstrings]
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.args and
             (getattr(n.func, "attr", None) or getattr(n.func, "id", None)) in _IMPORTERS]
    computed = any(not isinstance(call.args[0], ast.Constant) for call in calls)
    found = set()
    for node in strings:
        text = node.value
        named = _MODULE_FUNCTION.match(text)
        if named and named.group(1) in modules:
            found.add((module, named.group(1)))
        elif text in modules and (computed or any(call.args[0] is node for call in calls)):
            found.add((module, text))
    return {edge for edge in found if edge[0] != edge[1]}


def _compiled_modules() -> list[str]:
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return sorted(_module_name(p).split(".cpython")[0].split(".abi3")[0]
                  for p in (ROOT / "lisa_ext").rglob("*.so") if p.name.endswith(suffixes))


def import_graph():
    """import-linter's graph of lisa_ext (grimp), made whole: compiled modules are placed where
    they are (grimp counts ``from package import _compiled`` as an import of the package), and
    every import by name is added."""
    import grimp

    graph = grimp.build_graph("lisa_ext", cache_dir=None)
    for compiled in _compiled_modules():
        package, name = compiled.rsplit(".", 1)
        graph.add_module(compiled)
        for importer in graph.find_modules_that_directly_import(package):
            lines = [d["line_contents"] for d in graph.get_import_details(importer=importer, imported=package)]
            if lines and all(re.fullmatch(rf"from {re.escape(package)} import {name}", line) for line in lines):
                graph.remove_import(importer=importer, imported=package)
                graph.add_import(importer=importer, imported=compiled)
    modules = set(graph.modules)
    for path in sorted((ROOT / "lisa_ext").rglob("*.py")):
        for importer, imported in string_imports(path.read_text(), _module_name(path), modules):
            graph.add_import(importer=importer, imported=imported, line_number=0, line_contents="<by name>")
    return graph


def _contracts() -> list[tuple[str, list[list[str]], bool]]:
    """(container, layers, whether command modules are exempt) of every layers contract."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    found = []
    for section in config.sections():
        if config[section].get("type") != "layers":
            continue
        contract = section.split(":")[-1]
        container = config[section]["containers"].strip()
        layers = [[n.strip() for n in layer.split("|")] for layer in _layers(contract, container)]
        found.append((container, layers, "lisa_ext.*.cli -> lisa_ext.**" in config[section].get("ignore_imports", "")))
    return found


def layer_violations(edges: set[tuple[str, str]]) -> list[str]:
    """The edges (importer, imported) that run up a layer contract or across one layer's
    independent modules."""
    bad = []
    for importer, imported in sorted(edges):
        if importer == "lisa_ext.cli" or importer.endswith(".cli"):
            continue  # command modules may import anything (see .importlinter)
        for container, layers, _exempt in _contracts():
            prefix = container + "."
            if not (importer.startswith(prefix) and imported.startswith(prefix)):
                continue
            a, b = importer[len(prefix):].split(".")[0], imported[len(prefix):].split(".")[0]
            where = {name: i for i, layer in enumerate(layers) for name in layer}
            if a == b or a not in where or b not in where:
                continue
            if where[b] < where[a] or (where[b] == where[a]):
                bad.append(f"{importer} imports {imported} by name, against {container}'s layers")
    return bad


def test_string_imports_are_found_and_checked():
    """The check fails on an import by name across layers, whatever form it takes."""
    modules = {"lisa_ext.trace.read", "lisa_ext.analysis.registry", "lisa_ext.report.figures",
               "lisa_ext.studies.idle_gating"}
    source = '''"""Docstrings may name lisa_ext.analysis.registry freely."""
import importlib
importlib.import_module("lisa_ext.analysis.registry")
BUILDER = "lisa_ext.studies.idle_gating:plot_idle_residency"
'''
    edges = string_imports(source, "lisa_ext.trace.read", modules)
    assert edges == {("lisa_ext.trace.read", "lisa_ext.analysis.registry"),
                     ("lisa_ext.trace.read", "lisa_ext.studies.idle_gating")}
    assert len(layer_violations(edges)) == 2
    # a table of names looked up at run time counts as imports of each
    table = 'import importlib\nMODULES = {"a": "lisa_ext.report.figures"}\ndef f(n): importlib.import_module(MODULES[n])\n'
    assert string_imports(table, "lisa_ext.trace.read", modules) == {("lisa_ext.trace.read", "lisa_ext.report.figures")}
    # downwards is fine
    assert layer_violations({("lisa_ext.report.figures", "lisa_ext.trace.read")}) == []


def test_no_import_by_name_runs_up_the_layers():
    graph = import_graph()
    edges = {(importer, imported) for importer in graph.modules
             for imported in graph.find_modules_directly_imported_by(importer)
             if any(d["line_contents"] == "<by name>"
                    for d in graph.get_import_details(importer=importer, imported=imported))}
    assert layer_violations(edges) == []


def test_the_import_graph_has_no_cycle():
    """No module reaches itself through imports, string imports and package parents included
    (``lisa_ext.trace`` and ``lisa_ext.trace.lisa_parser`` used to import each other)."""
    graph = import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph.modules)))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    assert cycles == []


# -- kinds of target ----------------------------------------------------------------------------


def _ends_in_target(node: ast.AST) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return name.lower().endswith("target")


def kind_tests(source: str, kinds: set[str]) -> list[int]:
    """Lines of ``source`` that branch on a kind of target: ``isinstance``/``issubclass`` against
    an implementation named in ``kinds``, or a comparison of a target's ``kind``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("isinstance", "issubclass") \
                and len(node.args) == 2:
            classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            if any((getattr(c, "attr", None) or getattr(c, "id", None)) in kinds for c in classes):
                lines.append(node.lineno)
        elif isinstance(node, ast.Compare):
            if any(isinstance(side, ast.Attribute) and side.attr == "kind" and _ends_in_target(side.value)
                   for side in (node.left, *node.comparators)):
                lines.append(node.lineno)
    return lines


def test_kind_tests_are_found():
    kinds = {"BoardTarget", "SshTarget"}
    source = """
if isinstance(target, BoardTarget): pass
if isinstance(t, (int, target_mod.SshTarget)): pass
if self.session.target.kind != "host": pass
if isinstance(x, dict) or spec.kind == "fio" or target.description == "x": pass
"""
    assert kind_tests(source, kinds) == [2, 3, 4]


def test_only_the_target_package_branches_on_a_kind_of_target():
    """What differs between kinds of target is asked of the target (a method or property of
    :class:`lisa_ext.target.Target`), never decided by testing its kind outside lisa_ext.target."""
    from lisa_ext.target import IMPLEMENTATIONS

    kinds = {impl.__name__ for impl in IMPLEMENTATIONS}
    found = [f"{path.relative_to(ROOT)}:{line}"
             for path in sorted((ROOT / "lisa_ext").rglob("*.py")) if "target" not in path.relative_to(ROOT).parts
             for line in kind_tests(path.read_text(), kinds)]
    assert found == []


def test_analyses_are_registered_by_a_declared_entry_point():
    """lisa_hook (the bottom layer) loads what packages declare; lisa-ext declares its registry."""
    from importlib.metadata import entry_points

    from lisa_ext import lisa_hook

    declared = {e.value for e in entry_points(group=lisa_hook.ANALYSES_GROUP)}
    assert "lisa_ext.analysis.registry" in declared
    assert "lisa_ext.analysis" not in (ROOT / "lisa_ext" / "lisa_hook.py").read_text().split('"""', 2)[2]
