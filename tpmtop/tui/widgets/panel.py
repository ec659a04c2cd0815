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
