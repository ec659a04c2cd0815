"""The latest TPM commands, newest at the bottom; can be frozen and filtered."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.content import Content
from textual.widgets import Input

from tpmtop.tui.model import StreamRow
from tpmtop.tui.widgets.panel import Panel
from tpmtop.tui.widgets.table import KeyedTable

# Most telling first: on a narrow screen handles and sessions scroll off to the right.
COLUMNS = (("t", "t s", 9), ("origin", "origin", 8), ("command", "command", 16), ("us", "µs", 7),
           ("rc", "rc", 8), ("handles", "handles", 17), ("sessions", "sessions", 11))
MAX_ROWS = 200


class StreamPanel(Panel):
    title = "Command stream"

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.frozen = False
        self.needle = ""
        self.buffer: list[StreamRow] = []  # the latest rows, filtered or not
        self.skipped = 0

    def compose(self) -> ComposeResult:
        yield KeyedTable(COLUMNS, id="stream-table")
        yield Input(placeholder="filter: command or origin (Enter to apply, Esc to close)", id="stream-filter")

    @property
    def table(self) -> KeyedTable:
        return self.query_one(KeyedTable)

    def add(self, rows: list[StreamRow]) -> None:
        if rows:
            self.buffer.extend(rows)
            del self.buffer[:-MAX_ROWS * 10]
        if not self.frozen:
            self._render_rows()

    def _render_rows(self) -> None:
        shown = [r for r in self.buffer if r.matches(self.needle)][-MAX_ROWS:]
        t = self.table
        cells = [(r.key, (r.t, r.origin, r.command, r.us, r.rc if r.ok else Content.styled(r.rc, "$error"),
                          r.handles, r.sessions)) for r in shown]
        at_end = t.cursor_row >= t.row_count - 1
        if t.sync(cells) and at_end and t.row_count:
            t.move_cursor(row=t.row_count - 1, animate=False)
        self._subtitle()

    def _subtitle(self) -> None:
        bits = []
        if self.frozen:
            bits.append("frozen (s)")
        if self.needle:
            bits.append(f"filter '{self.needle}'")
        self.border_subtitle = " · ".join(bits)

    def toggle(self) -> bool:
        self.frozen = not self.frozen
        if not self.frozen:
            self._render_rows()
        self._subtitle()
        return self.frozen

    def open_filter(self) -> None:
        f = self.query_one("#stream-filter", Input)
        f.add_class("-open")
        f.value = self.needle
        f.focus()

    def set_filter(self, needle: str) -> None:
        self.needle = needle.strip()
        self.query_one("#stream-filter", Input).remove_class("-open")
        self._render_rows()
        self.table.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.set_filter(event.value)

    def on_key(self, event) -> None:
        if event.key == "escape" and self.query_one("#stream-filter", Input).has_class("-open"):
            event.stop()
            self.set_filter(self.needle)
