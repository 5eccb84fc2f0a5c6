"""The house's rules that no linter checks: no import cycle, and rooms of a size
one can read (docs/architecture.md, "Layout").

import-linter (``make lint``) checks the layers; it does not look for cycles inside
one layer or between modules no contract names. The cycles are counted directly:
grimp (import-linter's own import graph) lists every import statement of every
module of the four packages, at any depth in the module (lazy imports and
``TYPE_CHECKING`` blocks too), and a strongly connected component of more than one
module is a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
# The product's code, where modules and classes are kept small.
SIZED = ("lakepubsub", "api", "jobs")
MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 300
# A module may be larger if one of its lines says why, starting with this.
LARGER_BECAUSE = "# Larger than the house's limit because"

PACKAGES = ("lakepubsub", "api", "jobs", "bench")


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph is deep enough for recursion limits)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def test_the_search_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert [c for c in strongly_connected(edges) if len(c) > 1] == [["a", "b", "c"]]


def test_no_module_of_the_project_is_in_an_import_cycle() -> None:
    graph = grimp.build_graph(*PACKAGES)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert len(edges) > 100  # the four packages were found
    cycles = [c for c in strongly_connected(edges) if len(c) > 1]
    assert cycles == []


def sized_modules() -> list[Path]:
    return sorted(p for package in SIZED for p in (ROOT / package).rglob("*.py"))


def oversized(path: Path, root: Path = ROOT) -> list[str]:
    """What in ``path`` is over the limits (a module that says why may be larger)."""
    text = path.read_text()
    if LARGER_BECAUSE in text:
        return []
    name = path.relative_to(root)
    lines = text.count("\n")
    found = [f"{name}: {lines} lines"] if lines > MAX_MODULE_LINES else []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
            length = node.end_lineno - node.lineno + 1
            if length > MAX_CLASS_LINES:
                found.append(f"{name}: class {node.name}, {length} lines")
    return found


def test_the_size_check_sees_a_long_class_unless_the_module_says_why(tmp_path: Path) -> None:
    body = "class A:\n" + "    x = 1\n" * MAX_CLASS_LINES
    (tmp_path / "long.py").write_text(body)
    (tmp_path / "said.py").write_text(f"{LARGER_BECAUSE} it must be.\n" + body)
    assert oversized(tmp_path / "long.py", tmp_path) == [
        f"long.py: class A, {MAX_CLASS_LINES + 1} lines"
    ]
    assert oversized(tmp_path / "said.py", tmp_path) == []


def test_no_module_over_500_lines_and_no_class_over_300() -> None:
    modules = sized_modules()
    assert len(modules) > 100
    assert [finding for path in modules for finding in oversized(path)] == []
