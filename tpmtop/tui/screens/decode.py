"""The decode screen: one command of the stream and its response, to the parameter level.

Opened with Enter on the command stream. The bytes come from the recorder (live: it keeps
the newest commands' bytes) or from the capture's ``command_hex``/``response_hex`` (replay);
the decoding is :mod:`tpmtop.tpm.decode`, the same as ``tpmtop decode``.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tpmtop.sources.rows.stream import StreamRow


def buffers_for(source, row: StreamRow) -> tuple[bytes | None, bytes | None, str]:
    """(command, response, why not) for a stream row of a live or replay source."""
    if row.origin == "mark":
        return None, None, "a boundary, not a command"
    rec = getattr(source, "recorder", None)
    if rec is not None:
        try:
            seq = int(row.key)
        except ValueError:
            return None, None, "not a recorded command"
        ev = next((e for e in rec.events_since(seq - 1) if e.seq == seq), None)
        if ev is None:
            return None, None, "this command has left the recorder's ring buffer"
        if ev.command is None and getattr(ev, "note", None):
            return None, None, observed_text(ev)
        if ev.command is None:
            return None, None, "the recorder no longer keeps this command's bytes (only the newest ones)"
        return bytes(ev.command), bytes(ev.response) if ev.response is not None else None, ""
    capture = getattr(source, "capture", None)
    if isinstance(capture, dict):
        from tpmtop.sources import replay

        # the replay source numbers the rows it shows: the last MAX_STREAM_ROWS events
        events = (capture.get("events") or [])[-getattr(replay, "MAX_STREAM_ROWS", 2000):]
        try:
            e = events[int(row.key)]
        except (ValueError, IndexError):
            return None, None, "not in the capture"
        if not isinstance(e.get("command_hex"), str):
            if e.get("origin") == "kernel":
                return None, None, ("it was seen under tpmtop's kernel probes, which read only the command's "
                                    f"header: {e.get('command')}, rc {e.get('rc_text') or e.get('rc')}, "
                                    f"sent by {e.get('comm', '?')}-{e.get('pid', '?')} · {e.get('path', '?')}")
            return None, None, "the capture kept no bytes for this command"
        try:
            rsp = e.get("response_hex")
            return bytes.fromhex(e["command_hex"]), bytes.fromhex(rsp) if isinstance(rsp, str) else None, ""
        except ValueError:
            return None, None, "the capture's bytes for this command are not hex"
    return None, None, "this view has no command bytes"


def observed_text(ev) -> str:
    """What is known of a command tpmtop only saw (the kernel's): the probes read its header."""
    cc = f" (0x{ev.cc:x})" if ev.cc is not None else ""
    return (f"it was seen under tpmtop's kernel probes, which read only the command's header, so there "
            f"are no bytes to decode. What is known: {ev.name}{cc}, {ev.cmd_size} bytes; response "
            f"{ev.rsp_size} bytes, {ev.rc_text}; {ev.wire_ns / 1000:,.1f} µs on the wire; sent by {ev.client}")


class DecodeScreen(ModalScreen):
    DEFAULT_CSS = """
    DecodeScreen { align: center middle; }
    DecodeScreen > Vertical { width: 96%; height: 92%; border: round $accent; background: $surface; }
    DecodeScreen #decode-title { padding: 0 1; text-style: bold; }
    DecodeScreen VerticalScroll { padding: 0 1; }
    """
    BINDINGS = [
        Binding("escape", "dismiss", "Close", id="decode-close", tooltip="Back to the dashboard"),
        Binding("q", "dismiss", "Close", show=False, id="decode-close-q"),
        Binding("x", "toggle_hex", "Hex", id="decode-hex", tooltip="Show or hide the hex view"),
    ]

    def __init__(self, source, row: StreamRow) -> None:
        super().__init__()
        self.row = row
        self.command, self.response, self.why = buffers_for(source, row)
        self.show_hex = True

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
        from tpmtop.tpm import decode

        d = decode.decode(self.command, self.response)
        return decode.render(d, hexdump=self.show_hex)

    def action_toggle_hex(self) -> None:
        self.show_hex = not self.show_hex
        self.query_one("#decode-body", Static).update(self._text())
