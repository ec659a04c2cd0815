"""The packages others reach into (tpm/, sources/, proxy/, boot/) say in ``__all__`` which of
their modules are for outside use; no tpmtop module outside a package imports one of its other
modules (its own parts). Type-only imports count: grimp sees them."""

from __future__ import annotations

import importlib

import grimp
import pytest

PACKAGES = ("tpmtop.tpm", "tpmtop.sources", "tpmtop.proxy", "tpmtop.boot")


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("tpmtop", cache_dir=None)


@pytest.mark.parametrize("package", PACKAGES)
def test_outside_imports_go_through_the_front_door(graph, package):
    door = set(importlib.import_module(package).__all__)
    inside = {m for m in graph.modules if m == package or m.startswith(package + ".")}
    assert door <= {m[len(package) + 1:].split(".")[0] for m in inside}, "a door to no module"
    behind = []
    for module in sorted(graph.modules - inside):
        for imported in graph.find_modules_directly_imported_by(module):
            if imported in inside and imported != package and imported[len(package) + 1:].split(".")[0] not in door:
                behind.append(f"{module} -> {imported}")
    assert behind == []


def test_the_check_can_fail(graph):
    """tpmtop.sources.live_workload is the live source's own part: not in the door."""
    import tpmtop.sources

    assert "live_workload" not in tpmtop.sources.__all__
    assert graph.find_modules_directly_imported_by("tpmtop.sources.live") >= {"tpmtop.sources.live_workload"}
