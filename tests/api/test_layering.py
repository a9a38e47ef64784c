"""Layering rules over the xloss sources (issue #28; docs/plans/kernel-families.md, step S1).

An AST walk over every module of the installed namespace (``xloss/``, and ``reference/`` and
``backends/``, installed as ``xloss.reference`` and ``xloss.backends``) reads every import, those
inside functions too, ``importlib.import_module("literal")`` calls, and strings naming a module
(``"xloss.a.b"`` or ``"xloss.a.b:attr"`` links, which name a module without importing it). Rules:

(a) no import cycle among ``xloss.*`` modules (imports only: a string runs nothing);
(b) no generic module imports or names a kernel-family module, and nothing outside ``xloss.backends``
    a backend module;
(c) no module uses another module's private name, or a private module from outside its package.

Each rule's allowlist is exactly today's violations, and a stale entry fails too: a step that removes a
violation deletes its entry, so the lists only shrink.
"""

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import xloss
import xloss.backends
import xloss.reference

# -- the walker: point it at another tree with walk(roots) ----------------------------------------


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    line: int
    lazy: bool  # inside a function: runs on call, not at import
    string: bool = False  # a string naming the module, not an import

    def where(self):
        return f"{self.src} (line {self.line}{', in a function' * self.lazy}{', a string' * self.string})"


def package_roots() -> dict[str, Path]:
    """Module prefix -> folder, for a source checkout (sibling folders) and an install (nested) alike."""
    return {"xloss": Path(xloss.__file__).parent, "xloss.reference": Path(xloss.reference.__path__[0]),
            "xloss.backends": Path(xloss.backends.__path__[0])}


def find_modules(roots: dict[str, Path]) -> dict[str, Path]:
    found = {}
    for prefix, folder in roots.items():
        nested = [r for r in roots.values() if r != folder and r.is_relative_to(folder)]  # the installed layout
        for path in sorted(folder.rglob("*.py")):
            if "__pycache__" not in path.parts and not any(path.is_relative_to(n) for n in nested):
                parts = path.relative_to(folder).with_suffix("").parts
                found[".".join((prefix, *parts[: -1 if parts[-1] == "__init__" else None]))] = path
    return found


def walk(roots: dict[str, Path] | None = None):
    """(modules, import edges, private uses as (module, private thing, line))."""
    mods = find_modules(roots or package_roots())
    edges, privates = set(), set()
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        _scan(name, package, ast.parse(path.read_text(), str(path)), mods, edges, privates)
    return mods, sorted(edges, key=lambda e: (e.src, e.line, e.dst)), sorted(privates)


def _owner(dotted, mods):
    """The longest prefix of ``dotted`` that is a module, or None outside the walked tree."""
    while dotted and dotted not in mods:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def _private(name):
    return name.startswith("_") and not name.endswith("__")


def _absolute(package, level, module):
    """``from ..module import`` (level 2) in ``package``, as an absolute name."""
    if not level:
        return module
    parts = package.split(".")
    return ".".join(parts[: len(parts) - level + 1] + ([module] if module else []))


def _dotted(node, bound):
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value, bound)
        return head and f"{head}.{node.attr}"
    return bound.get(node.id) if isinstance(node, ast.Name) else None


MODULE_STRING = re.compile(r"xloss(\.\w+)+(:\w+)?")


def _scan(name, package, tree, mods, edges, privates):
    bound = {}  # local name -> the xloss module an import bound it to (per file, ignoring scopes)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound.update((a.asname or a.name.partition(".")[0], a.name if a.asname else a.name.partition(".")[0])
                         for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(package, node.level, node.module)
            bound.update((a.asname or a.name, f"{base}.{a.name}") for a in node.names if f"{base}.{a.name}" in mods)

    def edge(node, target, lazy, string=False):
        dst = _owner(target, mods)
        if dst and dst != name:
            edges.add(Edge(name, dst, node.lineno, lazy, string))

    def private(node, target):  # target: a module, or a module's attribute
        owner = _owner(target, mods)
        if owner is None or owner == name:
            return
        parts = owner.split(".")
        inside = [".".join(parts[:i]) for i, part in enumerate(parts) if _private(part)]  # a private module's package
        if inside and not (name + ".").startswith(inside[0] + "."):
            privates.add((name, ".".join(parts[: len(inside[0].split(".")) + 1]), node.lineno))
        elif target != owner and _private(target.rpartition(".")[2]):
            privates.add((name, target, node.lineno))

    def visit(node, lazy):
        if isinstance(node, ast.Import):
            for alias in node.names:
                edge(node, alias.name, lazy)
                private(node, alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(package, node.level, node.module)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                edge(node, full if full in mods else base, lazy)
                private(node, full)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module":
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                dots = len(arg.value) - len(arg.value.lstrip("."))  # import_module(".x", __package__)
                edge(node, _absolute(package, dots, arg.value[dots:]), lazy)
                node = ast.Call(node.func, node.args[1:], node.keywords)  # the literal is read: not a string link
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_STRING.fullmatch(node.value):
            if node.value.partition(":")[0] in mods:
                edge(node, node.value.partition(":")[0], lazy, string=True)
        elif isinstance(node, ast.Attribute) and _private(node.attr) and _dotted(node.value, bound) in mods:
            private(node, f"{_dotted(node.value, bound)}.{node.attr}")
        inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)


def import_cycles(edges, limit=200):
    """The elementary cycles (each from its smallest module), as lists of edges; at most ``limit``."""
    graph, back, found = {}, {}, []
    for e in edges:
        if not e.string:
            graph.setdefault(e.src, {}).setdefault(e.dst, e)  # edges come sorted: the first line names the pair
            back.setdefault(e.dst, set()).add(e.src)

    def dfs(path, reaches):
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == path[0] and len(found) < limit:
                found.append([graph[a][b] for a, b in zip(path, path[1:] + path[:1])])
            elif nxt > path[0] and nxt in reaches and nxt not in path and len(found) < limit:
                dfs([*path, nxt], reaches)

    for start in sorted(graph):
        reaches, todo = {start}, [start]  # the modules that import their way back to start
        while todo:
            todo.extend(m for m in back.get(todo.pop(), ()) if m not in reaches and not reaches.add(m))
        dfs([start], reaches)
    return found


def chain(cycle):
    """``a (line 3) -> b (line 9, in a function) -> a``: each module with the line of its import of the next."""
    return " -> ".join(e.where() for e in cycle) + f" -> {cycle[0].src}"


# -- the layers (plan §0, §3a and S6) --------------------------------------------------------------

DESCRIPTORS = {"focal", "bce", "nll", "flce", "vocab_parallel"}  # xloss.conformance.<kernel>: family code today
REFERENCE_KERNELS = {"focal", "bce", "nll", "flce"}  # xloss.reference.<kernel>
TORCH_FAMILY = {"focal", "bce", "nll", "mmdet", "detection", "hf", "liger_compat", "paper"}  # and flce*


def layer(module: str) -> str:
    """backend, family, generic, or other (``reference._common`` and the ``backends`` namespace package)."""
    top, sub = (module.split(".")[1:] + ["", ""])[:2]
    if top == "backends":
        return "backend" if sub else "other"  # the namespace package alone holds no backend (plan §3b, clib.py)
    if top == "reference":  # the package re-exports every kernel's formulas (plan §10-7)
        return "family" if sub in REFERENCE_KERNELS or not sub else "other"
    family = ((top == "conformance" and sub in DESCRIPTORS) or (top == "bench" and sub == "training")  # lm_step
              or (top == "torch" and (sub in TORCH_FAMILY or sub.startswith("flce")))
              or (top == "kernels" and sub))  # the family packages from S6 on: xloss/kernels/<family>/
    return "family" if family else "generic"


def family_or_backend_imports(edges) -> dict[str, list[Edge]]:
    """Rule (b): generic -> family, and anything outside ``xloss.backends`` -> a backend (plan §3b: a backend
    is reached through the registry, never imported by name)."""
    found = {}
    for e in edges:
        src, dst = layer(e.src), layer(e.dst)
        if (src == "generic" and dst == "family") or (src != "backend" and dst == "backend"):
            found.setdefault(f"{short(e.src)} -> {short(e.dst)}", []).append(e)
    return found


def short(module):
    return module.removeprefix("xloss.")


# -- the allowlists: today's violations, each removed by the plan step named -----------------------

ALLOWED_CYCLES: set = set()

ALLOWED_LAYER_IMPORTS: set = set()

ALLOWED_PRIVATE: set = set()


# -- the tests --------------------------------------------------------------------------------------


@functools.cache
def _walked():
    return walk()


def _compare(found: dict[str, list[str]], allowed: set, rule: str):
    new = [f"  {key}: {'; '.join(found[key])}" for key in sorted(found) if key not in allowed]
    stale = [f"  {key}" for key in sorted(allowed - found.keys())]
    problems = [f"{rule}: new violation(s):", *new] if new else []
    problems += [f"{rule}: stale allowlist entries (the violation is gone: delete them):", *stale] if stale else []
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def test_no_import_cycles():
    cycles = import_cycles(_walked()[1])
    found = {" -> ".join(short(e.src) for e in cycle): [chain(cycle)] for cycle in cycles}
    _compare(found, ALLOWED_CYCLES, "import cycle (a)")


def test_generic_modules_import_no_family_or_backend_module():
    found = {key: [e.where() for e in edges] for key, edges in family_or_backend_imports(_walked()[1]).items()}
    _compare(found, ALLOWED_LAYER_IMPORTS, "generic -> family/backend import (b)")


def test_no_private_names_across_modules():
    found = {}
    for src, target, line in _walked()[2]:
        found.setdefault(f"{short(src)} -> {short(target)}", []).append(f"{src} (line {line})")
    _compare(found, ALLOWED_PRIVATE, "private name across modules (c)")


def test_the_walker_finds_each_kind_of_violation(tmp_path):
    """A made-up tree, one violation per rule, each where a walk of module-level imports would miss it."""
    files = {"xloss/a.py": "def f():\n    from . import b\n",
             "xloss/b.py": "import importlib\n\nimportlib.import_module('xloss.a')\n",
             "xloss/c.py": "from .conformance import large\n\nlarge._kwargs()\n",
             "xloss/conformance/large.py": "def f():\n    from ..reference import focal\n\n\n"
                                           "L = 'xloss.backends.cpu.rows:f'\n"}
    for rel in ["xloss", "xloss/conformance", "reference", "backends", "backends/cpu"]:
        files[f"{rel}/__init__.py"] = ""
    files["reference/focal.py"] = files["backends/cpu/rows.py"] = ""
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    _, edges, privates = walk({"xloss": tmp_path / "xloss", "xloss.reference": tmp_path / "reference",
                               "xloss.backends": tmp_path / "backends"})
    assert [chain(c) for c in import_cycles(edges)] == [
        "xloss.a (line 2, in a function) -> xloss.b (line 3) -> xloss.a"]
    assert {k: [e.where() for e in v] for k, v in family_or_backend_imports(edges).items()} == {
        "conformance.large -> reference.focal": ["xloss.conformance.large (line 2, in a function)"],
        "conformance.large -> backends.cpu.rows": ["xloss.conformance.large (line 5, a string)"]}
    assert privates == [("xloss.c", "xloss.conformance.large._kwargs", 3)]
