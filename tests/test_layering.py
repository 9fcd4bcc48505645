"""The package map holds: no two rafka packages import each other, ``wire`` is the leaf, and
only the composition root (``rafka/``: node start-up, local clusters, the ``rafka`` command)
imports everything.

Read from the source tree with ``ast`` (every import counts: top-level, lazy inside a function,
and under ``TYPE_CHECKING``), so a new cycle fails here before anyone has to untangle it. The
allowed arrows are written out in ``docs/internals.md``; this test enforces the part that
matters: the graph is acyclic and the leaves stay leaves.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("wire", "log", "metadata", "kraft", "security", "broker", "client", "spark_source",
            "chaos_tests")
# modules of the composition root (rafka/): they may import any package, no package imports them
COMPOSITION_ROOT = {p.stem for p in (ROOT / "rafka").glob("*.py")} - {"__init__"}
# each package may import only these (besides itself); wire ← log ← broker, metadata ← kraft
ALLOWED: dict[str, set[str]] = {
    "wire": set(),
    "log": {"wire"},
    "metadata": {"wire", "log"},
    "security": {"wire", "metadata"},
    "kraft": {"wire", "log", "metadata", "security"},
    "broker": {"wire", "log", "metadata", "kraft", "security"},
    "client": {"wire", "log", "metadata", "security"},
    "spark_source": {"wire", "log", "client", "security"},
    "chaos_tests": {"wire", "log", "metadata", "broker", "client", "security"},  # node configs
}


def _imports(path: Path) -> set[str]:
    """The rafka modules ``path`` imports, as dotted names without the ``rafka.`` prefix."""
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "rafka" and len(parts) > 1:
                out.add(".".join(parts[1:]))
    return out


def package_graph() -> dict[str, dict[str, set[str]]]:
    """package → imported package (or ``rafka.<root module>``) → the files that import it."""
    graph: dict[str, dict[str, set[str]]] = {p: {} for p in PACKAGES}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            if "tests" in f.relative_to(ROOT).parts:
                continue
            for mod in _imports(f):
                head = mod.split(".")[0]
                target = head if head in PACKAGES else (
                    f"rafka.{head}" if head in COMPOSITION_ROOT else None)
                if target is not None and target != pkg:
                    graph[pkg].setdefault(target, set()).add(str(f.relative_to(ROOT)))
    return graph


def _cycles(graph: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """Strongly connected components of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, {}):
            if w not in graph:
                continue
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

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_package_imports_another_that_imports_it_back() -> None:
    graph = package_graph()
    cycles = _cycles(graph)
    detail = {c: {d: sorted(graph[c].get(d, ())) for d in cyc if d != c} for cyc in cycles
              for c in cyc}
    assert not cycles, f"package cycles {cycles}: {detail}"


def test_each_package_imports_only_what_the_map_allows() -> None:
    graph = package_graph()
    extra = {pkg: {dep: sorted(files) for dep, files in deps.items() if dep not in ALLOWED[pkg]}
             for pkg, deps in graph.items()}
    extra = {pkg: deps for pkg, deps in extra.items() if deps}
    assert not extra, f"imports the package map (docs/internals.md) does not allow: {extra}"


def test_the_checker_sees_a_cycle(tmp_path: Path) -> None:
    """The check can fail: a graph with a back edge is reported."""
    graph = {"wire": {"broker": {"x"}}, "broker": {"wire": {"y"}}, "log": {}}
    assert _cycles(graph) == [["broker", "wire"]]
    assert _imports(_write(tmp_path, "from rafka.broker.server import Server\n")) >= {
        "broker.server"}
    lazy = "def f():\n    import rafka.client.cli\n"
    assert "client.cli" in _imports(_write(tmp_path, lazy))


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "m.py"
    p.write_text(text)
    return p


def test_the_package_map_in_the_docs_is_this_table() -> None:
    """docs/internals.md §0 states what each package may import; it must say what is enforced."""
    doc = (ROOT / "docs" / "internals.md").read_text()
    rows: dict[str, set[str]] = {}
    for line in doc.split("## The contracts between packages")[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0].rstrip("`").endswith("/"):
            pkg = cells[0].strip("`").rstrip("/")
            if pkg in ALLOWED:
                allowed = cells[2]
                rows[pkg] = {p for p in PACKAGES if f"`{p}`" in allowed}
    assert rows == ALLOWED
