"""Issue 39: the dashboard uses Textual through its public API only. Every attribute tpmtop's
TUI reads, writes or overrides is checked against Textual's own private names: a ``_name`` that
Textual defines anywhere (a method, a class attribute, an attribute it sets on ``self``) may be
used only where ``tpmtop/tui/compat.py`` lists it, with the start-up check that fails when
Textual renames it. No ``textual._x`` module is imported outside compat either."""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from functools import cache
from pathlib import Path

import textual

from tpmtop.tui import compat

TUI = Path(__file__).resolve().parents[2] / "tpmtop" / "tui"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@cache
def textual_private_names() -> frozenset[str]:
    """Every private name Textual defines: ``def _x``, ``_x = …`` in a class, ``self._x = …``."""
    names: set[str] = set()
    for path in Path(textual.__file__).parent.rglob("*.py"):
        names |= _defined_in(ast.parse(path.read_text(encoding="utf-8")))
    return frozenset(names)


def _defined_in(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _private(node.name):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr):
            names.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                targets = item.targets if isinstance(item, ast.Assign) else \
                    [item.target] if isinstance(item, ast.AnnAssign) else []
                names.update(t.id for t in targets if isinstance(t, ast.Name) and _private(t.id))
    return names


@cache
def _textual_class_private(cls: type) -> frozenset[str]:
    return frozenset(_defined_in(ast.parse(textwrap.dedent(inspect.getsource(cls)))))


def private_of_bases(cls: type) -> frozenset[str]:
    """The private names the Textual classes in ``cls``'s MRO define (what ``self._x`` or an
    override in ``cls`` would reach or shadow)."""
    names: set[str] = set()
    for base in cls.__mro__:
        if base.__module__.split(".")[0] == "textual":
            names |= _textual_class_private(base)
    return frozenset(names)


def tpmtop_uses() -> list[tuple[str, int, str]]:
    """(file, line, what) for every private Textual name tpmtop's TUI touches or overrides:
    ``self._x`` and overrides checked against the Textual classes the class derives from,
    ``obj._x`` on anything else against every private name Textual defines, and imports."""
    everywhere = textual_private_names()
    found = []
    for path in sorted(TUI.rglob("*.py")):
        if path.name == "compat.py":
            continue
        rel = str(path.relative_to(TUI.parent.parent))
        module = importlib.import_module(".".join(path.relative_to(TUI.parent.parent).with_suffix("").parts))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_class: dict[int, frozenset[str]] = {}  # id(node) -> the private names its class's bases define
        for top in tree.body:
            if isinstance(top, ast.ClassDef):
                cls = getattr(module, top.name, None)
                bases = private_of_bases(cls) if isinstance(cls, type) else everywhere
                for node in ast.walk(top):
                    in_class[id(node)] = bases
                for item in top.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in bases:
                        found.append((rel, item.lineno, f"def {item.name}"))
                    if isinstance(item, (ast.Assign, ast.AnnAssign)):
                        targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                        found.extend((rel, item.lineno, t.id) for t in targets
                                     if isinstance(t, ast.Name) and t.id in bases)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
                names = in_class.get(id(node), everywhere) if on_self else everywhere
                if node.attr in names:
                    found.append((rel, node.lineno, node.attr))
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("textual"):
                if any(_private(part) for part in node.module.split(".")):
                    found.append((rel, node.lineno, f"from {node.module} import"))
                found.extend((rel, node.lineno, f"import {a.name}") for a in node.names if _private(a.name))
            elif isinstance(node, ast.Import):
                found.extend((rel, node.lineno, f"import {a.name}") for a in node.names
                             if a.name.startswith("textual") and any(_private(p) for p in a.name.split(".")))
    return sorted(set(found))


def test_the_textual_private_names_are_found():
    """The net catches what the dashboard used before (issue 39's list): it can fail."""
    private = textual_private_names()
    for name in ("_render_cell", "_row_locations", "_on_notify", "_refresh_notifications", "_filters",
                 "_stop_propagation", "_dirty_widgets", "_classes", "_parse_rules", "_message_queue"):
        assert name in private, name


def test_the_tui_uses_no_private_textual_name_outside_compat():
    assert tpmtop_uses() == []


def test_each_compat_hook_is_checked_at_start_up_and_holds():
    """compat lists each irreducible hook with its check; each check passes on this Textual."""
    for hook in compat.HOOKS:
        module = importlib.import_module(hook.module)
        assert hook.check(module), hook


def test_the_main_screen_is_one_class_under_250_lines_without_mixins():
    """Issue 39: MainScreen's keys, workers and refresh are collaborators, not a mixin chain."""
    from tpmtop.tui.screens.main import MainScreen
    from tpmtop.tui.widgets.backdrop import BackdropScreen

    lines, _ = inspect.getsourcelines(MainScreen)
    assert len(lines) < 250
    ours = [c for c in MainScreen.__mro__[1:] if c.__module__.startswith("tpmtop.")]
    assert ours == [BackdropScreen, *[c for c in BackdropScreen.__mro__[1:] if c.__module__.startswith("tpmtop.")]]


# Where tests and benchmarks may still reach a Textual private name, and why there is no public
# way: none now. A frame leaving for the terminal is seen by a driver of the test's own
# (App.driver_class, run_test(headless=False): tests/helpers/frames.py), and a component class's
# rules through Widget.get_component_styles (tests/tui/test_tui_themes.py).
TEST_ONLY: dict[str, str] = {}


def test_tests_and_benchmarks_use_no_other_private_textual_name():
    """Issue 54: tests and benchmarks too (private Textual modules, _compositor, timer._interval,
    _css_update_count, app._exit, …), but for the hooks above; ``os._exit`` is the stdlib's."""
    repo = TUI.parent.parent
    ours: set[str] = set()
    for path in (repo / "tpmtop").rglob("*.py"):
        ours |= _defined_in(ast.parse(path.read_text(encoding="utf-8")))
    textuals = textual_private_names() - ours
    found = []
    for path in sorted([*(repo / "tests").rglob("*.py"), *(repo / "benchmarks").rglob("*.py")]):
        rel = str(path.relative_to(repo))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in textuals and node.attr not in TEST_ONLY:
                if not (isinstance(node.value, ast.Name) and node.value.id == "os"):
                    found.append((rel, node.lineno, node.attr))
            elif (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("textual")
                  and any(_private(part) for part in node.module.split("."))):
                found.append((rel, node.lineno, f"from {node.module} import"))
    assert found == []
