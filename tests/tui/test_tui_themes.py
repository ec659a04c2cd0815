"""Themes as files: the four shipped ones load, a bad one is skipped with a notice, the
choice is remembered under XDG_CONFIG_HOME, and the app uses --theme."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers.paths import REPO, TESTS
from tpmtop.sources.replay import ReplaySource, load
from tpmtop.tui import themes
from tpmtop.tui.app import TpmtopApp

FIXTURE = TESTS / "tui_fixtures" / "slb9670-extend.json"


def test_shipped_themes_load_with_meaning_colours():
    loaded = themes.load_themes()
    assert loaded.notices == []
    assert loaded.names[0] == "dark"
    assert {"dark", "light", "high-contrast", "colour-blind-safe"} <= set(loaded.names)
    cb = next(t for t in loaded.themes if t.name == "colour-blind-safe")
    assert cb.variables["latency-slow"] != themes.VARIABLE_DEFAULTS["latency-slow"]
    for t in loaded.themes:
        assert set(themes.VARIABLE_DEFAULTS) <= set(t.variables)


def test_bad_theme_file_is_skipped_with_a_notice(tmp_path):
    d = tmp_path / "themes"
    d.mkdir()
    (d / "broken.toml").write_text('name = "broken"\n[colors]\nprimary = "not-a-colour"\n')
    (d / "garbage.toml").write_text("[[[")
    (d / "ok.toml").write_text('name = "ok"\n[colors]\nprimary = "#ff0000"\n')
    loaded = themes.load_themes(d)
    assert sorted(loaded.names) == ["dark", "ok"]  # built-in dark as the fallback
    assert len(loaded.notices) == 2 and any("not a colour" in n for n in loaded.notices)


def test_missing_themes_folder_falls_back_to_builtin(tmp_path):
    loaded = themes.load_themes(tmp_path / "nowhere")
    assert loaded.names == ["dark"]


def test_list_themes_marks_the_default_and_the_remembered_one(tmp_path):
    """`tpmtop --list-themes`, whatever else is on the line (as --version): the shipped themes,
    one a line, the default first; the one the dashboard remembers is marked."""
    assert themes.remember_theme("light") is None
    r = subprocess.run([sys.executable, "-m", "tpmtop", "--list-themes", "info", "--sim"], capture_output=True,
                       text=True, timeout=60, cwd=REPO,
                       env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert (r.returncode, r.stderr) == (0, "")
    rows = [line.split(None, 1) for line in r.stdout.splitlines()]
    assert rows == [["dark", "(default)"], ["colour-blind-safe"], ["high-contrast"], ["light", "(chosen last)"]]


def test_choice_is_remembered(tmp_path):
    assert themes.remembered_theme() is None
    assert themes.remember_theme("light") is None
    assert themes.remembered_theme() == "light"
    assert (tmp_path / "config" / "tpmtop" / "dashboard.toml").exists()


async def test_app_uses_and_remembers_theme():
    src = ReplaySource(load(FIXTURE), FIXTURE)
    app = TpmtopApp(src, theme="high-contrast")
    async with app.run_test(size=(100, 30)) as pilot:
        assert app.theme == "high-contrast"
        await pilot.press("t")
        await pilot.pause()
        assert app.theme != "high-contrast"
        assert themes.remembered_theme() == app.theme
    app2 = TpmtopApp(ReplaySource(load(FIXTURE), FIXTURE))
    async with app2.run_test(size=(100, 30)):
        assert app2.theme == themes.remembered_theme()


async def test_unknown_theme_falls_back_with_notice():
    app = TpmtopApp(ReplaySource(load(FIXTURE), FIXTURE), theme="no-such", remember=False)
    async with app.run_test(size=(100, 30)):
        assert app.theme == "dark"
        assert any("no-such" in n for n in app.theme_notices)



def _cells(app) -> list[list[tuple[str, str]]]:
    """Every cell of the screen as drawn, its character and style (colours included), but the
    message line's: a switch says "theme …" there."""
    from tests.helpers.tui import drawn
    from tpmtop.tui.widgets.messages import MessageLine

    skip = {*app.screen.query(MessageLine), *(c for w in app.screen.query(MessageLine) for c in w.query("*"))}
    return [[(seg.text, str(seg.style)) for seg in strip] for w, strips in drawn(app) if w not in skip
            for strip in strips]


def component_styles(node) -> dict:
    """A node's component classes (COMPONENT_CLASSES of its class and its bases) and the
    styles Textual resolved for each (get_component_styles), as the widget draws them; a
    name a subclass does not inherit is not the node's (KeyError)."""
    out = {}
    for name in {c for cls in type(node).__mro__ for c in getattr(cls, "COMPONENT_CLASSES", ())}:
        try:
            out[name] = node.get_component_styles(name)
        except KeyError:
            continue
    return out


def _styles(app) -> list:
    """Every node's rules and its component classes' rules, in the screen's order."""
    def rules(styles) -> list:
        return sorted((k, repr(v)) for k, v in styles.base.get_rules().items())

    return [(type(n).__name__, n.id, rules(n.styles),
             sorted((name, rules(st)) for name, st in component_styles(n).items()))
            for n in app.screen.walk_children(with_self=True)]


async def test_a_theme_switched_to_draws_as_a_fresh_start_in_it():
    # Two rounds of `t` through the themes: neither may keep a colour of the theme before, nor
    # give a node a rule a fresh start in that theme does not.
    app = TpmtopApp(ReplaySource(load(FIXTURE), FIXTURE), theme="dark", remember=False)
    switched: dict[tuple[int, str], tuple[list, list]] = {}
    async with app.run_test(size=(120, 40)) as pilot:
        for rnd in range(2):
            for _ in range(len(app.tpmtop_themes)):
                await pilot.press("t")
                await pilot.pause()
                await app.workers.wait_for_complete()
                await pilot.pause()
                switched[(rnd, app.theme)] = (_cells(app), _styles(app))
    assert {name for _, name in switched} == set(app.tpmtop_themes)
    for name in app.tpmtop_themes:
        fresh = TpmtopApp(ReplaySource(load(FIXTURE), FIXTURE), theme=name, remember=False)
        async with fresh.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await fresh.workers.wait_for_complete()
            await pilot.pause()
            for rnd in range(2):
                cells, styles = switched[(rnd, name)]
                assert _styles(fresh) == styles, (rnd, name)
                assert _cells(fresh) == cells, (rnd, name)
