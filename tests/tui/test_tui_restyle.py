"""What a theme switch draws is what Textual itself would draw: a backdrop rendered one row for
all gives the same segments, text and style, as Textual's full path, under every theme."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import Static

from tpmtop.tui.widgets.backdrop import BackdropScreen, Column, Row

THEMES = ["textual-dark", "textual-light", "nord", "gruvbox", "textual-dark"]  # and back to the first


def _drawn(strips) -> list[list[tuple]]:
    return [[(s.text, s.style, s.control) for s in strip] for strip in strips]


class _Boxes(BackdropScreen):
    def compose(self) -> ComposeResult:
        with Column(id="framed"):
            yield Static("framed")
        with Row(id="plain"):
            yield Static("plain")
        with Column(id="outlined"):
            yield Static("outlined")
        with Column(id="hatched"):
            yield Static("hatched")
        with Row(id="keyed"):
            yield Static("one")
            yield Static("two")

    def on_mount(self) -> None:
        framed = self.query_one("#framed")
        framed.border_title, framed.border_subtitle = "Latency", "p50"


class _BoxesApp(App):
    CSS = """
    #framed { border: round $primary; border-title-color: $accent; padding: 1 2; height: 9; }
    #plain { height: 5; }
    #outlined { outline: heavy $error; height: 6; }
    #hatched { hatch: right $primary 40%; height: 4; }
    #keyed { keyline: thin $primary; height: 5; }
    Static { width: 10; }
    """

    def get_default_screen(self) -> _Boxes:
        return _Boxes()


@pytest.mark.parametrize("size", [(40, 30), (23, 30)])
async def test_a_backdrop_draws_what_textual_draws_under_every_theme(size):
    app = _BoxesApp()
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        boxes = [*app.screen.query("Column, Row"), app.screen]
        assert len(boxes) == 6
        for theme in THEMES:
            app.theme = theme
            await pilot.pause()
            for box in boxes:
                whole = Region(0, 0, box.region.width, box.region.height)
                part = Region(1, 2, max(1, box.region.width - 3), max(1, box.region.height - 3))
                for crop in (whole, part):
                    assert _drawn(box.render_lines(crop)) == _drawn(Widget.render_lines(box, crop)), (box, theme)
