"""The layout rules of DESIGN.md, checked: module size, function size, import circles.

Run ``python tools/check_layout.py`` from the repository root (exit 1 when a rule is broken);
``tests/base/test_layout.py`` runs the same checks.

* **Modules**: at most :data:`MAX_MODULE_LINES` lines each.
* **Functions**: at most :data:`MAX_FUNCTION_LINES` lines each (decorators and docstring
  included), except those listed in :data:`LONG_FUNCTIONS` (at most :data:`MAX_LONG`, each
  with the reason it stays whole).
* **Layers**: a module imports only from its own package or from packages below it in
  :data:`LAYERS` (DESIGN.md's layer map).
* **Imports**: the graph of imports between ``privcal`` modules has no cycle, imports inside
  functions included (a deferred import hides a circle, it does not remove it); only those
  under ``TYPE_CHECKING`` are left out. A package's ``__init__`` importing its own submodules is
  an edge like any other.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 120
MAX_LONG = 3
#: The packages of ``privcal``, top to bottom: a module may import from its own package and from
#: the ones below it. ``_base`` stands for the shared helpers at the root (``_params``,
#: ``_text``, ``_blocks``, ``exceptions``); the package ``privcal`` itself is the top.
LAYERS = (
    "cli",
    "experiments",
    "report",
    "audits",
    "sklearn",
    "torch",
    "federated",
    "training",
    "conformal",
    "private",
    "calibrators",
    "plots",
    "metrics",
    "privacy",
    "data",
    "_base",
)
_BASE = ("_params", "_text", "_blocks", "exceptions")
#: ``module:qualified name`` -> why it stays one function.
LONG_FUNCTIONS: dict[str, str] = {
    "privcal.federated.simulation:simulate": "a public entry point: its signature and numpydoc "
    "docstring (each parameter, the returns and the guarantee) take 121 lines, the body 74",
}


def modules(src: Path = SRC) -> dict[str, Path]:
    """Dotted module name -> file, for every module under ``src/privcal``."""
    out = {}
    for path in sorted((src / "privcal").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def long_modules(src: Path = SRC) -> list[tuple[str, int]]:
    """``(module, lines)`` of every module over :data:`MAX_MODULE_LINES`."""
    found = []
    for name, path in modules(src).items():
        n = len(path.read_text().splitlines())
        if n > MAX_MODULE_LINES:
            found.append((name, n))
    return found


def long_functions(src: Path = SRC) -> list[tuple[str, int]]:
    """``(module:qualname, lines)`` of every function over :data:`MAX_FUNCTION_LINES`."""
    found = []

    def visit(node: ast.AST, module: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    n = (child.end_lineno or child.lineno) - start + 1
                    if n > MAX_FUNCTION_LINES:
                        found.append((f"{module}:{name}", n))
                visit(child, module, f"{name}.")

    for module, path in modules(src).items():
        visit(ast.parse(path.read_text()), module, "")
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """Module -> the ``privcal`` modules it imports (anywhere but under ``TYPE_CHECKING``)."""
    mods = modules(src)
    graph: dict[str, set[str]] = {m: set() for m in mods}

    def target(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    for module, path in mods.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        body: list[ast.AST] = [ast.parse(path.read_text())]
        while body:
            node = body.pop(0)
            if isinstance(node, ast.If) and _is_type_checking(node):
                body[:0] = list(node.orelse)
            elif not isinstance(node, (ast.Import, ast.ImportFrom)):
                body[:0] = list(ast.iter_child_nodes(node))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("privcal"):
                        t = target(alias.name)
                        if t and t != module:
                            graph[module].add(t)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base]) if base else ".".join(up)
                if not base.startswith("privcal"):
                    continue
                for alias in node.names:  # ``from pkg import submodule`` imports the submodule
                    t = target(f"{base}.{alias.name}") if f"{base}.{alias.name}" in mods else None
                    t = t or target(base)
                    if t and t != module:
                        graph[module].add(t)
    return graph


def layer_of(module: str) -> int:
    """Index of ``module``'s package in :data:`LAYERS` (-1 for ``privcal`` itself, the top)."""
    parts = module.split(".")
    if len(parts) == 1:
        return -1
    name = "_base" if parts[1] in _BASE else parts[1]
    if name not in LAYERS:
        raise ValueError(f"{module}: package {parts[1]!r} is not in LAYERS (DESIGN.md's map)")
    return LAYERS.index(name)


def upward_imports(src: Path = SRC) -> list[tuple[str, str]]:
    """``(importer, imported)`` where a module imports from a package above its own."""
    return sorted(
        (a, b)
        for a, targets in import_graph(src).items()
        for b in targets
        if layer_of(b) < layer_of(a) and layer_of(b) != -1
    )


def import_cycles(src: Path = SRC) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    graph = import_graph(src)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(10_000)

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            strong(v)
    return out


def main() -> int:
    problems = [f"module over {MAX_MODULE_LINES} lines: {m} ({n})" for m, n in long_modules()]
    funcs = long_functions()
    extra = [(f, n) for f, n in funcs if f not in LONG_FUNCTIONS]
    problems += [f"function over {MAX_FUNCTION_LINES} lines: {f} ({n})" for f, n in extra]
    if len(LONG_FUNCTIONS) > MAX_LONG:
        problems.append(f"{len(LONG_FUNCTIONS)} long functions allowed, at most {MAX_LONG}")
    problems += [f"import circle: {' <-> '.join(c)}" for c in import_cycles()]
    problems += [f"upward import: {a} -> {b}" for a, b in upward_imports()]
    print("\n".join(problems) or "layout: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
