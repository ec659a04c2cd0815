"""No import cycle in tpmtop, type-only imports included (grimp reads every import statement,
those under ``if TYPE_CHECKING:`` too). The proxy's conn/session/state circle is being taken
apart on its own branch (issue 54): it is the one left, and the only one allowed here."""

from __future__ import annotations

import grimp

ALLOWED: set[frozenset[str]] = set()  # none: the proxy's conn/session/state circle went with its composition


def cycles(graph) -> list[frozenset[str]]:
    """Each set of modules that import each other round (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if not w.startswith("tpmtop."):
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.add(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(frozenset(part))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle():
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))  # the walk is as deep as the longest import chain
    try:
        found = cycles(grimp.build_graph("tpmtop", cache_dir=None))
    finally:
        sys.setrecursionlimit(limit)
    assert [sorted(c) for c in found if c not in ALLOWED] == []


def test_a_cycle_is_found():
    graph = grimp.ImportGraph()
    for m in ("tpmtop.a", "tpmtop.b", "tpmtop.c"):
        graph.add_module(m)
    graph.add_import(importer="tpmtop.a", imported="tpmtop.b")
    graph.add_import(importer="tpmtop.b", imported="tpmtop.a")
    graph.add_import(importer="tpmtop.b", imported="tpmtop.c")
    assert cycles(graph) == [frozenset({"tpmtop.a", "tpmtop.b"})]
