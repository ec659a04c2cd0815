"""Enter on a handle: what the TPM says about it (ReadPublic) and what the wire showed."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.content import Content
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Static


class InspectScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,enter", "app.pop_screen", "Close", id="inspect-close",
                        tooltip="Back to the dashboard")]

    def __init__(self, title: str, rows: list[tuple[str, str]]) -> None:
        super().__init__()
        self.title_text, self.rows = title, rows

    def compose(self) -> ComposeResult:
        width = max((len(k) for k, _ in self.rows), default=10)
        lines = [f"[b]{escape(self.title_text)}[/]", ""]
        lines += [f"[b $accent]{escape(k):>{width}}[/]  {escape(v)}" for k, v in self.rows]
        lines += ["", "[dim]Read-only: ReadPublic for objects and persistent keys; a session is described by what "
                  "tpmtop saw on the wire (the TPM does not report it). Esc closes.[/]"]
        with VerticalScroll(id="inspect-box"):
            yield Static(Content.from_markup("\n".join(lines)), id="inspect-text")
