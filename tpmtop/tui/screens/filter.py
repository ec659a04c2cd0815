"""``/`` on a table (Handles, Latency): the text its rows must contain; empty shows all."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Input


class FilterScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="filter-cancel", tooltip="Keep the current filter")]

    def __init__(self, needle: str = "") -> None:
        super().__init__()
        self.needle = needle

    def compose(self) -> ComposeResult:
        yield Input(self.needle, placeholder="rows containing (a handle, a kind, tpmtop/other, a command); "
                    "empty: all. Enter applies, Esc cancels", id="table-filter")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
