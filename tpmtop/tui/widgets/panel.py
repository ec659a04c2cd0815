"""A bordered panel with a title; panels that need TPM traffic say so in ``--passive``."""

from __future__ import annotations

from textual.containers import Vertical
from textual.widgets import Static

NEEDS_TPM = "needs TPM traffic — off in --passive (the kernel's sessions stay untouched)"
NOT_IN_CAPTURE = "live only: a capture holds timings, not the TPM's handles and slots"


class Panel(Vertical):
    needs_tpm = True
    title = ""

    def __init__(self, **kw) -> None:
        super().__init__(classes="panel", **kw)
        self.border_title = self.title

    def mark_passive(self) -> None:
        """Replace the content by a note: in --passive this panel has no data source."""
        self.add_class("-passive")
        self.mount(Static(NEEDS_TPM, classes="passive-note"), before=0)

    def mark_replay(self) -> None:
        self.add_class("-passive")
        self.mount(Static(NOT_IN_CAPTURE, classes="passive-note"), before=0)


class QuietStatic:
    """Update a Static with markup only when the text changed, and ask for a screen relayout
    only when the rows it occupies changed (count of lines, and how each wraps at the current
    width). A Static update relayouts the whole screen by default; these panels re-send the same
    or same-shaped text every second, and a key pressed meanwhile waits behind that layout
    (benchmarks/ui_load.py)."""

    def __init__(self) -> None:
        self.markup = ""
        self.shape: tuple | None = None

    def set(self, static: Static, markup: str) -> None:
        from textual.content import Content

        if markup == self.markup and self.shape is not None:
            return
        content = Content.from_markup(markup)
        width = static.size.width
        rows = tuple(-(-line.cell_length // width) if width else -1 for line in content.split("\n"))
        shape = (width, rows)
        self.markup = markup
        static.update(content, layout=shape != self.shape or not width)
        self.shape = shape
