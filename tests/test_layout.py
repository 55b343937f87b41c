"""The floor plan, read from the tree's own imports (with ast): no import circle between modules, and no arrow that
runs up a layer (docs/layout.md). A string that names a project module ("benchmarks.studies.kflat", or
"module:attr") is an import too: that is how command tables and lazy imports reach a module."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from benchmarks.core.paths import ROOT

PACKAGES = ("benchmarks", "verification", "preparation")
# What each layer may import, besides itself (the first matching prefix decides a module's layer), bottom to top.
_BELOW_CONFIG = ("benchmarks.core", "benchmarks.hardware", "benchmarks.data", "benchmarks.decide", "benchmarks.engines")
_BELOW_RUN = _BELOW_CONFIG + ("benchmarks.config", "benchmarks.records", "verification")
_BELOW_STUDIES = _BELOW_RUN + ("benchmarks.run", "benchmarks.analysis", "benchmarks.figures", "benchmarks.report")
LAYERS = {
    "benchmarks.core": (),
    "benchmarks.hardware": ("benchmarks.core",),
    "benchmarks.data": ("benchmarks.core",),
    "benchmarks.decide": ("benchmarks.core",),
    "benchmarks.engines": ("benchmarks.core", "benchmarks.hardware", "benchmarks.data", "benchmarks.decide"),
    "benchmarks.config": _BELOW_CONFIG,
    "benchmarks.records": _BELOW_CONFIG + ("benchmarks.config",),
    "verification": _BELOW_CONFIG + ("benchmarks.config", "benchmarks.records"),
    "benchmarks.run": _BELOW_RUN,
    "benchmarks.analysis": _BELOW_RUN,
    "benchmarks.figures": _BELOW_RUN + ("benchmarks.analysis",),
    "benchmarks.report": _BELOW_RUN + ("benchmarks.analysis", "benchmarks.figures"),
    "benchmarks.studies": _BELOW_STUDIES,
    "benchmarks.tiny": _BELOW_STUDIES + ("benchmarks.studies",),
    "benchmarks.cli": _BELOW_STUDIES + ("benchmarks.studies", "benchmarks.tiny"),
    "benchmarks.__main__": ("benchmarks.cli",),
    "preparation": (),  # set-up only: it imports no project module, and no module imports it
}


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for f in (root / pkg).rglob("*.py"):
            rel = f.relative_to(root).with_suffix("")
            found[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = f
    return found


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string nodes that are docstrings (module, class, function)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports anywhere in its file (lazy imports included), or names in a string
    that is not a docstring."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        tree = ast.parse(f.read_text(), str(f))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                  and node.value.split(":", 1)[0] in mods):
                targets = [node.value.split(":", 1)[0]]
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
    ({"benchmarks.core.metrics": {"benchmarks.records.store"}, "benchmarks.records.store": {"benchmarks.core.metrics"}},
     "circle"),
    ({"benchmarks.config.matrix_parse": {"benchmarks.run.plan"}}, "up"),
    ({"benchmarks.engines.catalog": {"benchmarks.config.matrix_schema"}}, "up"),
    ({"verification.lossless": {"benchmarks.run.execute"}}, "up"),
])
def test_the_checks_see_a_circle_or_an_upward_arrow_added_on_purpose(extra, finds):
    edges = import_graph(modules())
    for m, targets in extra.items():
        edges[m] = edges[m] | targets
    assert (cycles(edges) if finds == "circle" else upward(edges)), extra


def test_a_string_import_into_preparation_is_an_arrow_the_checks_see(tmp_path):
    """A command table naming a set-up module by string: an import that breaks the order, seen and refused."""
    tree = {"benchmarks/__init__.py": "", "benchmarks/cli/__init__.py": "",
            "benchmarks/cli/table.py": 'COMMANDS = {"train": ("preparation.train_tiny", "retrain")}\n',
            "preparation/__init__.py": "", "preparation/train_tiny.py": '"""benchmarks.cli.table"""\n'}
    for name, text in tree.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    edges = import_graph(modules(tmp_path))
    assert edges["benchmarks.cli.table"] == {"preparation.train_tiny"}
    assert edges["preparation.train_tiny"] == set()  # a docstring that names a module is no import
    assert upward(edges) == ["benchmarks.cli.table (benchmarks.cli) imports preparation.train_tiny (preparation)"]


def _listed_modules() -> dict[str, set[str]]:
    """Folder -> the module files docs/layout.md's "Every module" names for it."""
    text = (ROOT / "docs" / "layout.md").read_text()
    section = text.split("## Every module", 1)[1].split("\n## ", 1)[0]
    listed: dict[str, set[str]] = {}
    for item in section.split("\n- ")[1:]:
        folder, _, rest = item.partition(":")
        listed[folder.strip("` ").rstrip("/")] = set(re.findall(r"`([a-z_0-9]+\.py)`", rest))
    return listed


def _folders() -> dict[str, set[str]]:
    """Folder -> its module files, as on disk (package markers and the entry point left out)."""
    found: dict[str, set[str]] = {}
    for f in modules().values():
        if f.name not in ("__init__.py", "__main__.py") and not f.is_relative_to(ROOT / "preparation"):
            found.setdefault(str(f.parent.relative_to(ROOT)), set()).add(f.name)
    return found


def test_the_layout_page_names_every_module_of_every_folder():
    assert _listed_modules() == _folders()


def test_no_two_modules_share_a_file_name():
    names = [name for files in _folders().values() for name in files]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_no_folder_holds_more_than_20_modules_or_a_quarter_of_the_code():
    lines = {folder: sum(len((ROOT / folder / f).read_text().splitlines()) for f in files)
             for folder, files in _folders().items()}
    total = sum(lines.values())
    assert {folder: len(files) for folder, files in _folders().items() if len(files) > 20} == {}
    assert {folder: round(n / total, 3) for folder, n in lines.items() if n > total / 4} == {}


def lazy_imports() -> list[tuple[str, int, str]]:
    """Every import inside a function of the packages: (file, line, its reason: the `# lazy:` comment on its line or
    the line above, "" where it has none)."""
    found = {}
    for f in modules().values():
        if f.is_relative_to(ROOT / "preparation"):
            continue
        lines = f.read_text().splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    here = lines[node.lineno - 1] + " " + (lines[node.lineno - 2] if node.lineno > 1 else "")
                    reason = here.split("# lazy:", 1)[1].strip() if "# lazy:" in here else ""
                    found[(str(f.relative_to(ROOT)), node.lineno)] = reason
    return [(f, n, why) for (f, n), why in sorted(found.items())]


def test_an_import_inside_a_function_says_why_it_is_lazy():
    lazy = lazy_imports()
    assert [(f, n) for f, n, why in lazy if not why] == []
    print(f"{len(lazy)} lazy imports, each with its reason")
