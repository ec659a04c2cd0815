"""The decode screen: one command of the stream and its response, field by field.

Opened with Enter on the command stream. The bytes come from the recorder (live: it keeps
the newest commands' bytes) or from the capture's ``command_hex``/``response_hex`` (replay);
the decoding is :mod:`tpmtop.decode`, the same as ``tpmtop decode``.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tpmtop.viewmodel.commands import Commands
from tpmtop.viewmodel.rows.stream import StreamRow


class DecodeScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    DecodeScreen { align: center middle; }
    DecodeScreen > Vertical { width: 96%; height: 92%; border: round $accent; background: $surface; }
    DecodeScreen #decode-title { padding: 0 1; text-style: bold; }
    DecodeScreen VerticalScroll { padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close", id="decode-close", tooltip="Back to the dashboard"),
        Binding("q", "dismiss", "Close", show=False, id="decode-close-q"),
        Binding("x", "toggle_hex", "Hex", id="decode-hex", tooltip="Show or hide the hex view"),
    ]

    def __init__(self, commands: Commands, row: StreamRow) -> None:
        super().__init__()
        self.row = row
        self.command, self.response, self.why = commands.command_bytes(row)
        self.show_hex = True
        # Live: the commands before this one, for the plaintext of tpmtop's own encrypted
        # parameters; a replay's sessions are over, their keys gone.
        self.history = commands.decode_history(row)

    def compose(self) -> ComposeResult:
        rc = self.row.rc if self.row.rc.startswith("rc ") else f"rc {self.row.rc}"
        with Vertical():
            yield Static(f"{self.row.command}  ·  t {self.row.t.strip()} s  ·  {self.row.origin}  ·  "
                         f"{self.row.us} µs  ·  {rc}   ({'Esc closes, x hex' if self.command else 'Esc closes'})",
                         id="decode-title",
                         markup=False)
            with VerticalScroll():
                yield Static(self._text(), id="decode-body", markup=False)

    def _text(self) -> str:
        if self.command is None:
            return f"No decode: {self.why}."
        from tpmtop import decode
        from tpmtop.decode.plaintext import provider

        d = decode.decode(self.command, self.response, plaintext=provider(self.history))
        return decode.render(d, hexdump=self.show_hex)

    def action_toggle_hex(self) -> None:
        self.show_hex = not self.show_hex
        self.query_one("#decode-body", Static).update(self._text())
