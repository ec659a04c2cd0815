"""Containers that draw only a backdrop: their background, and a border and padding round
it. Their rows between the top and bottom edges are all alike, so one is rendered and
repeated.

Textual renders every row of every widget on a full frame, a container's rows included,
though its children cover them. Each row goes through the styles' whole pipeline (~15 µs a
row here), and a theme switch (``t``) is a full frame. At 140×44 the dashboard's eleven layout
containers and panels (~250 rows) took 5.7 ms of a 25.6 ms frame after ``t``; with one row
each, 2.6 ms, and the frame 19.7 ms: a row repeated is also cut into the frame's pieces once
(Strip caches its cuts). Measured unloaded on the 2-core Xeon VM, median of 16 switches.
"""

from __future__ import annotations

from textual.containers import Horizontal, Vertical
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget


class Backdrop(Widget):
    """A container with no content of its own: rows inside its border and padding are only
    its background. Subclasses must not override ``render``. Mixed in after the Textual
    class (``Column(Vertical, Backdrop)``): Textual takes a widget's CSS type names and default
    CSS from the first base only."""

    def render_lines(self, crop: Region) -> list[Strip]:
        styles = self.styles
        if self._draws_inside():
            return super().render_lines(crop)
        height = self.region.height
        gutter = styles.gutter
        # The rows of the border (its title), the padding and an outline differ; the rest are alike.
        top = max(gutter.top, styles.outline_top[0] not in ("", "none"))
        bottom = max(gutter.bottom, styles.outline_bottom[0] not in ("", "none"))
        plain: Strip | None = None  # the first row inside, for all the others
        strips: list[Strip] = []
        for y in crop.line_range:
            edge = y < top or y >= height - bottom
            if edge or plain is None:
                strip = super().render_lines(Region(crop.x, y, crop.width, 1))[0]
                if not edge:
                    plain = strip
            else:
                strip = plain
            strips.append(strip)
        return strips

    def _draws_inside(self) -> bool:
        """True where the rows inside differ: Textual renders each then."""
        styles = self.styles
        # A keyline draws between the children; a hatch repeats one character, alike on every row.
        return str(styles.keyline[0]) != "none" or not self.is_container


class Column(Vertical, Backdrop):
    """A Vertical that renders one row of its backdrop."""


class Row(Horizontal, Backdrop):
    """A Horizontal that renders one row of its backdrop."""


class BackdropScreen(Screen[None], Backdrop):
    """A Screen whose background, when opaque, renders one row for all."""

    def _draws_inside(self) -> bool:
        # A translucent screen draws the screen below it.
        return self.styles.background.a < 1 or super()._draws_inside()
