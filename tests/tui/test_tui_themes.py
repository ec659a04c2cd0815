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
    from tpmtop.tui.widgets.messages import MessageLine

    update = app.screen._compositor.render_update(full=True)  # the whole screen, as sent
    skip = {y for w in app.screen.query(MessageLine) for y in range(w.region.y, w.region.bottom)}
    return [[(seg.text, str(seg.style)) for strip in line for seg in strip]
            for y, line in enumerate(update.strips) if y not in skip]


def _styles(app) -> list:
    """Every node's rules and its component classes' rules, in the screen's order."""
    def rules(styles) -> list:
        return sorted((k, repr(v)) for k, v in styles.base._rules.items())

    return [(type(n).__name__, n.id, rules(n.styles),
             sorted((name, rules(st)) for name, st in n._component_styles.items()))
            for n in app.screen.walk_children(with_self=True)]


async def test_a_theme_switched_to_draws_as_a_fresh_start_in_it():
    # `t` sets only the rules whose values changed, refreshes each node once, and takes what a
    # node matched from the caches (tpmtop.tui.stylesheet): the first round through the themes
    # matches each theme's rules once, the second takes them from the cache. Neither may keep
    # a colour of the theme before, nor give a node a rule a fresh start in that theme does not.
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


async def test_a_restyle_refreshes_each_widget_once_with_what_textual_would_have_asked():
    # tpmtop.tui.stylesheet batches the refreshes a restyle asks for (a colour: the node's whole
    # subtree) and refreshes each widget once. Every widget Textual's own Styles.refresh would
    # have refreshed is refreshed, with at least the same layout and repaint, with no more calls.
    from itertools import product

    from textual.widget import Widget

    from tpmtop.tui.stylesheet import _refresh_once

    app = TpmtopApp(ReplaySource(load(FIXTURE), FIXTURE), theme="dark", remember=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        nodes = [n for n in app.screen.walk_children(with_self=True) if n._is_mounted]
        deep = max(nodes, key=lambda n: len(n.ancestors))
        # The screen (a subtree with the others in it), the deepest widget and one in between
        # whose parent is none of them (what a parent refresh reaches only through `parent`).
        mid = next(n for n in nodes[len(nodes) // 2:] if n.parent not in (app.screen, deep) and n is not deep)
        picks = [app.screen, deep, mid]
        fewer = False
        calls: list[tuple[object, bool, bool]] = []
        real = Widget.refresh

        def record(self, *regions, repaint=True, layout=False, recompose=False):
            calls.append((self, layout, repaint))
            return self

        def merged() -> dict[int, tuple[bool, bool]]:
            out: dict[int, tuple[bool, bool]] = {}
            for node, layout, repaint in calls:
                had = out.get(id(node), (False, False))
                out[id(node)] = (had[0] or layout, had[1] or repaint)
            return out

        try:
            Widget.refresh = record
            for flags in product([False, True], repeat=4):
                asked = [(n, dict(zip(("layout", "children", "parent", "repaint"), flags, strict=True)))
                         for n in picks]
                calls.clear()
                for node, a in asked:
                    node.styles.refresh(**a)
                textual_asked, textual_calls = merged(), len(calls)
                calls.clear()
                _refresh_once(asked)
                assert len(calls) <= textual_calls, flags
                once = merged()
                fewer |= len(calls) < textual_calls
                assert once.keys() == textual_asked.keys(), flags
                for key, (layout, repaint) in textual_asked.items():
                    assert once[key][0] >= layout and once[key][1] >= repaint, flags
        finally:
            Widget.refresh = real
        assert fewer, "a subtree refresh inside another was not skipped"


async def test_a_first_switch_to_a_rehearsed_theme_matches_no_selector_and_draws_as_a_fresh_start(monkeypatch):
    # Once the other themes are parsed (a worker), what each node would be given under each is
    # worked out between keys on the UI thread (TpmtopApp._rehearse_theme), with the App's theme
    # classes and :dark/:light as the switch will leave them (DataTable has a :dark rule). The
    # first switch to each theme then matches no selector, and what it gives each node and draws
    # is what a fresh start in that theme gives and draws.
    from textual.css.stylesheet import Stylesheet
    from textual.worker import WorkerCancelled

    from tpmtop.tui.stylesheet import ThemeStylesheet

    matched: list[object] = []
    textual_apply = Stylesheet.apply

    def counting(self, node, **kw):
        if type(self) is ThemeStylesheet and self._paths is not None:  # during a restyle's pass
            matched.append(node)
        return textual_apply(self, node, **kw)

    monkeypatch.setattr(Stylesheet, "apply", counting)
    app = TpmtopApp(ReplaySource(load(FIXTURE), FIXTURE), theme="dark", remember=False)
    switched: dict[str, tuple[list, list]] = {}
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(len(app.tpmtop_themes)):  # every theme once, back to the first
            app._warm_themes()  # what the timer starts 3 s after a switch (once keys are at rest)
            while True:  # the timer's own run may replace this one (one at a time): its work is the same
                try:
                    await app.workers.wait_for_complete()
                    break
                except WorkerCancelled:
                    continue
            await pilot.pause()
            matched.clear()
            await pilot.press("t")
            await pilot.pause()
            assert matched == [], app.theme
            switched[app.theme] = (_cells(app), _styles(app))
    assert set(switched) == set(app.tpmtop_themes)
    for name, (cells, styles) in switched.items():
        fresh = TpmtopApp(ReplaySource(load(FIXTURE), FIXTURE), theme=name, remember=False)
        async with fresh.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            assert _styles(fresh) == styles, name
            assert _cells(fresh) == cells, name


async def test_a_rehearsal_waits_until_no_key_has_come_for_a_while(monkeypatch):
    # A rehearsal takes the UI thread for ~8 ms a theme; run while keys come, it lands in their
    # time to screen. Each waits until the last key is KEYS_AT_REST_S old.
    import time

    from textual.worker import WorkerCancelled

    from tpmtop.tui.app import KEYS_AT_REST_S

    rehearsed: list[tuple[str, float]] = []
    monkeypatch.setattr(TpmtopApp, "_rehearse_theme", lambda self, name, variables: rehearsed.append(
        (name, time.monotonic())))
    app = TpmtopApp(ReplaySource(load(FIXTURE), FIXTURE), theme="dark", remember=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("t")
        key_at = app._key_at
        rehearsed.clear()
        app._warm_themes()
        while True:
            try:
                await app.workers.wait_for_complete()
                break
            except WorkerCancelled:
                continue
    assert {name for name, _ in rehearsed} == set(app.tpmtop_themes)
    assert all(at >= key_at + KEYS_AT_REST_S for _, at in rehearsed)
