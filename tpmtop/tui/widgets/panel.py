"""A bordered panel with a title. A source shows only the panels it can fill (its
capabilities, tpmtop.sources.protocol), so no panel needs to say it has nothing."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from textual.content import Content
from textual.widgets import Static

from tpmtop.tui.widgets.backdrop import Column

P = TypeVar("P")


class Panel(Column, Generic[P]):
    """A panel of the table in :mod:`tpmtop.tui.panels`: it draws its part (``P``) of each frame
    of the view-model, which the screen hands it (tpmtop.tui.panels.PanelSpec.part_of), and
    never asks the source itself."""

    title = ""
    has_content = True  # False: nothing to show now (the layout hides it, as Clients without holders)

    def __init__(self, **kw: Any) -> None:
        super().__init__(classes="panel", **kw)
        self.border_title = self.title

    def show_part(self, part: P) -> None:
        """Draw the part (what the panel's build, or the view-model, gave)."""
        raise NotImplementedError  # each panel draws its own part


class QuietStatic:
    """Update a Static with markup only when the text changed, and ask for a screen relayout
    only when the rows it occupies changed (count of lines, and how each wraps at the current
    width). A Static update relayouts the whole screen by default; these panels re-send the same
    or same-shaped text every second, and a key pressed meanwhile waits behind that layout
    (benchmarks/ui_load.py)."""

    def __init__(self) -> None:
        self.markup: object = ""
        self.shape: tuple[int, tuple[int, ...]] | None = None

    def set(self, static: Static, markup: str | Content) -> None:
        """``markup``: our own markup text, or a Content built with markup variables (which
        is how text from elsewhere — a task's name, a capture — is shown: never parsed)."""
        from textual.content import Content

        if markup == self.markup and self.shape is not None:
            return
        content = markup if isinstance(markup, Content) else Content.from_markup(markup)
        width = static.content_size.width
        # Rows as the Static will wrap them (at word boundaries: a long line can take one row
        # more than its length divided by the width, and the panel then cut its last line).
        rows = tuple(len(line.wrap(width)) if width else -1 for line in content.split("\n"))
        shape = (width, rows)
        self.markup = markup
        static.update(content, layout=shape != self.shape or not width)
        self.shape = shape
