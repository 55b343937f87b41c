"""The floor plan, read from the tree's own imports (with ast): no import circle between modules, and no arrow that
runs up a layer (docs/layout.md)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from benchmarks.core.paths import ROOT

PACKAGES = ("benchmarks", "verification", "preparation")
# What each layer may import, besides itself (the first matching prefix decides a module's layer).
LAYERS = {
    "benchmarks.core": (),
    "benchmarks.engines": ("benchmarks.core",),
    "verification": ("benchmarks.core",),
    "benchmarks.run": ("benchmarks.core", "benchmarks.engines", "verification"),
    "benchmarks.analysis": ("benchmarks.core", "verification"),
    "benchmarks.studies": ("benchmarks.core", "benchmarks.engines", "verification", "benchmarks.run",
                           "benchmarks.analysis"),
    "benchmarks.cli": ("benchmarks.core", "benchmarks.engines", "verification", "benchmarks.run",
                       "benchmarks.analysis", "benchmarks.studies"),
    "benchmarks.__main__": ("benchmarks.cli",),
    "preparation": ("benchmarks", "verification"),
}


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for f in (root / pkg).rglob("*.py"):
            rel = f.relative_to(root).with_suffix("")
            found[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = f
    return found


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports anywhere in its file (lazy imports included)."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != m and not m.startswith(t + "."):  # a package's own __init__ is no edge
                    edges[m].add(t)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def layer(module: str) -> str | None:
    return max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len, default=None)


def upward(edges: dict[str, set[str]]) -> list[str]:
    """Imports a module's layer does not allow."""
    bad = []
    for m, targets in sorted(edges.items()):
        own = layer(m)
        for t in sorted(targets):
            theirs = layer(t)
            if own is None or theirs == own:
                continue
            if not any(t == a or t.startswith(a + ".") for a in LAYERS[own]):
                bad.append(f"{m} ({own}) imports {t} ({theirs})")
    return bad


def test_no_import_circle():
    assert cycles(import_graph(modules())) == []


def test_no_layer_imports_one_above_it():
    assert upward(import_graph(modules())) == []


def test_every_module_has_a_layer():
    assert [m for m in modules() if layer(m) is None and m not in PACKAGES and m != "benchmarks.__init__"] == []


@pytest.mark.parametrize("extra, finds", [
    ({"benchmarks.core.metrics": {"benchmarks.core.store"}, "benchmarks.core.store": {"benchmarks.core.metrics"}},
     "circle"),
    ({"benchmarks.core.config": {"benchmarks.engines"}}, "up"),
    ({"verification.lossless": {"benchmarks.run.dispatch"}}, "up"),
])
def test_the_checks_see_a_circle_or_an_upward_arrow_added_on_purpose(extra, finds):
    edges = import_graph(modules())
    for m, targets in extra.items():
        edges[m] = edges[m] | targets
    assert (cycles(edges) if finds == "circle" else upward(edges)), extra
