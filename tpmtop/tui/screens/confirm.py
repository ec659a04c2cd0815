"""Yes/no before doing something that cannot be undone (flushing another program's handle)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", id="confirm-yes", tooltip="Do it"),
        Binding("n,escape", "answer(False)", "No", id="confirm-no", tooltip="Leave it alone"),
    ]

    def __init__(self, question: str, detail: str = "") -> None:
        super().__init__()
        self.question = question
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            # Plain text: the detail may name another program (its name is not markup).
            yield Static(self.question, id="confirm-question", markup=False)
            if self.detail:
                yield Static(self.detail, id="confirm-detail", markup=False)
            with Horizontal(id="confirm-buttons"):
                yield Button("Flush (y)", variant="error", id="yes")
                yield Button("Cancel (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
