"""``/``: a filter line at the top of the focused panel (Handles, Latency, the stream), not a box
in the middle of the screen over other panels. It says what it filters by in that panel and how
to leave; Ctrl-U clears it (wherever the cursor is); Enter applies, Esc leaves it unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import Input, Static

# What a panel's rows can be filtered by: short enough for the Handles panel at 120 columns.
PLACEHOLDERS = {
    "handles": "handle, kind, owner",
    "latency": "a command (ContextLoad…)",
    "stream": "command, origin or errors",
}
HINT = "⏎ applies · Esc leaves"  # Ctrl-U clears: in the help (?), as readline has it


class FilterInput(Input):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+u", "clear_all", "Clear", show=False, id="filter-clear", tooltip="Clear the filter text"),
        Binding("escape", "leave", "Leave", show=False, id="filter-leave", tooltip="Leave; the filter stays as it was"),
    ]

    def action_clear_all(self) -> None:
        self.value = ""

    def action_leave(self) -> None:
        if isinstance(self.parent, PanelFilter):
            self.parent.finish(None)


class PanelFilter(Horizontal):
    """Mounted at the top of a panel by ``/``; removes itself once applied or left. ``done``
    gets the text (Enter) or None (Esc, or focus moved elsewhere)."""

    def __init__(self, panel_id: str, needle: str, done: Callable[[str | None], None], input_id: str) -> None:
        super().__init__(classes="panel-filter")
        self.panel_id, self.needle, self.done, self.input_id = panel_id, needle, done, input_id
        self._finished = False

    def compose(self) -> ComposeResult:
        placeholder = PLACEHOLDERS.get(self.panel_id, "rows containing…")
        field = FilterInput(self.needle, placeholder=placeholder, id=self.input_id)
        field.tooltip = "Ctrl-U clears; Enter applies; Esc leaves the filter as it was"
        yield field
        yield Static(Content.from_markup("[dim]$h[/]", h=HINT), classes="panel-filter-hint")

    def on_mount(self) -> None:
        field = self.query_one(FilterInput)
        field.focus()
        field.cursor_position = len(field.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.finish(event.value)

    def on_descendant_blur(self) -> None:
        self.call_after_refresh(self._left_by_focus)

    def _left_by_focus(self) -> None:
        if not self._finished and self.is_attached and not self.has_focus_within:
            self.finish(None, refocus=False)

    def finish(self, needle: str | None, refocus: bool = True) -> None:
        if self._finished:
            return
        self._finished = True
        panel = self.parent
        self.remove()
        self.done(needle)
        if refocus and panel is not None:
            focusable = [w for w in panel.query("*") if w.can_focus and w.display and not isinstance(w, FilterInput)]
            if focusable:
                focusable[0].focus()
