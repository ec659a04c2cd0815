"""The Stream panel's rows: one per command the recorder (or a capture) holds, and the
boundaries (marks) between TPM periods. No Textual here."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import msgspec

from tpmtop.sources.protocol import CapturedStream
from tpmtop.sources.replay import MAX_STREAM_ROWS, rc_not_traced
from tpmtop.tpm import names
from tpmtop.tpm.exchange import Origin
from tpmtop.viewmodel.numbers import fmt_us

if TYPE_CHECKING:
    from tpmtop.decode.plaintext import History
    from tpmtop.recorder import Event
CC_FLUSH_CONTEXT = 0x165  # its handle is a parameter, not in the handle area


class StreamRow(msgspec.Struct, gc=False):
    """One line of the stream. Strings and a flag only, so the garbage collector need not track
    it (gc=False: it can be in no reference cycle): a replay holds up to MAX_STREAM_ROWS of them
    and a live stream makes one per command shown, and each tracked object lengthens every full
    collection, which stops every thread (benchmarks/ui_load.py --gc-only)."""

    key: str
    t: str
    origin: str
    command: str
    handles: str
    sessions: str
    rc: str
    us: str
    ok: bool

    def matches(self, needle: str) -> bool:
        """Command or origin contains ``needle``; the word ``errors`` keeps failed commands."""
        n = needle.lower()
        if n == "errors":
            return not self.ok
        return not n or n in self.command.lower() or n in self.origin


def _sessions_text(sessions: Iterable[tuple[int, int]]) -> str:
    return " ".join(f"{h:08x}:{a:02x}" if h != 0x40000009 else f"PW:{a:02x}" for h, a in sessions)


def _handles_of(ev: Event) -> list[int]:
    """The handles a command names; FlushContext's target is a parameter, not in the handle
    area, yet it is the one thing worth seeing on that line."""
    handles = list(ev.handles)
    cmd = getattr(ev, "command", None)
    if ev.cc == CC_FLUSH_CONTEXT and not handles and cmd is not None and len(cmd) >= 14:
        handles.append(int.from_bytes(cmd[10:14], "big"))
    return handles


def seconds_since(t_ns: int, t0_ns: int) -> str:
    """The stream's time column. Never negative: a command in flight when `r` restarted the
    clock began a few ms before it, and shows at 0."""
    return f"{max(0, t_ns - t0_ns) / 1e9:.3f}"


def stream_row(ev: Event, t0_ns: int) -> StreamRow:
    note = getattr(ev, "note", None)
    handles = " ".join(f"{h:08x}" for h in _handles_of(ev))
    if note:  # a command tpmtop only saw (the kernel's): its path, and which task sent it
        origin, handles = note, ev.client or ""
    elif getattr(ev, "client", None):
        origin = f"client:{ev.client}"  # a proxied program (tpmtop --listen)
    else:
        origin = ev.origin
    unknown = getattr(ev, "rc_unknown", False)
    return StreamRow(str(ev.seq), seconds_since(ev.t_ns, t0_ns), origin, ev.name.removeprefix("TPM2_CC_"),
                     handles, _sessions_text(ev.sessions),
                     short_rc(ev.rc, ev.error, unknown), fmt_us(ev.wire_ns / 1000), ev.rc == 0 or unknown)


def failed(ev: Event) -> bool:
    """A command that did not succeed (an observed one whose code was not traced did not fail)."""
    return ev.rc != 0 and not getattr(ev, "rc_unknown", False) and not getattr(ev, "expected", False)


def event_matches(ev: Event, needle: str) -> bool:
    """``needle`` (lower case) in the event's origin, where it came from, or its command."""
    return (needle in ev.origin or needle in ev.name.lower() or needle in (getattr(ev, "note", None) or "").lower()
            or needle in (getattr(ev, "client", None) or "").lower())  # a kernel row's task


class LazyStreamRows:
    """The recorder's whole ring as stream rows, converted only when looked at: a frozen
    stream can scroll back through every command the recorder keeps (100,000) without
    building 100,000 rows. ``items`` are Events and (t_ns, text) marks, oldest first."""

    def __init__(self, items: list[Any], t0_ns: int, needle: str = "") -> None:
        self.t0 = t0_ns
        if needle:
            n = needle.lower()
            errors = n == "errors"
            items = [x for x in items if isinstance(x, tuple) or (failed(x) if errors else event_matches(x, n))]
        self.items = items
        self._done: dict[int, StreamRow] = {}

    def __len__(self) -> int:
        return len(self.items)

    def _row(self, i: int) -> StreamRow:
        r = self._done.get(i)
        if r is None:
            x = self.items[i]
            r = self._done[i] = mark_row(x[0], self.t0, x[1]) if isinstance(x, tuple) else stream_row(x, self.t0)
        return r

    def __getitem__(self, k: int | slice) -> Any:
        if isinstance(k, slice):
            return [self._row(i) for i in range(*k.indices(len(self.items)))]
        return self._row(k if k >= 0 else len(self.items) + k)


def merge_marks(events: list[Any], marks: list[tuple[int, str]]) -> list[Any]:
    """Events and marks in time order (marks are few: a sort of the merged list is cheap)."""
    if not marks:
        return events
    return sorted(events + list(marks), key=lambda x: x[0] if isinstance(x, tuple) else x.t_ns)


def mark_row(t_ns: int, t0_ns: int, text: str) -> StreamRow:
    """A boundary in the stream (TPM reset, reconnection): origin "mark", the text as command."""
    return StreamRow(f"mark-{t_ns}", seconds_since(t_ns, t0_ns), "mark", text, "", "", "", "", True)


def stream_row_from_dict(i: int, e: dict[str, Any]) -> StreamRow:
    """An event of a capture's optional ``events`` array (tpmtop.capture/1)."""
    t = e.get("t_ns", e.get("offset_ns", e.get("t", 0))) or 0
    rc = e.get("rc")
    if isinstance(rc, str):
        try:
            rc = int(rc, 0)
        except ValueError:
            rc = None
    handles = e.get("handles") or []
    hs = " ".join(h.removeprefix("0x") if isinstance(h, str) else f"{h:08x}" for h in handles)
    sess = e.get("sessions") or []
    ss = " ".join(_session_text(s) for s in sess)
    name = str(e.get("command") or e.get("cc") or "?").removeprefix("TPM2_CC_")
    wire = e.get("wire_ns")
    origin = f"client:{e['client']}" if e.get("client") is not None else str(e.get("origin", "workload"))
    if isinstance(e.get("path"), str) and e.get("origin") == "kernel":
        # a command the kernel probes saw: its path and task, as the live view shows them
        from tpmtop.kernel.trace_pipe import path_label

        origin = path_label(e["path"])
        hs = f"{e.get('comm', '?')}-{e.get('pid', '?')} · {e['path']}"
    ok = rc == 0 or e.get("expected") is True
    if rc_not_traced(e):  # answered; only its response code is unknown
        return StreamRow(str(i), f"{float(t) / 1e9:.3f}", origin, name, hs, ss, "rc ?",
                         fmt_us(wire / 1000) if isinstance(wire, (int, float)) else "", True)
    return StreamRow(str(i), f"{float(t) / 1e9:.3f}", origin, name, hs, ss,
                     short_rc(rc, None), fmt_us(wire / 1000) if isinstance(wire, (int, float)) else "", ok)


def captured_rows(stream: CapturedStream) -> list[StreamRow]:
    """A capture's stream: a row per event, keyed by its index among the events kept; with
    ``decoded`` the handles column shows the decoded handles and parameters (--decode)."""
    rows = [stream_row_from_dict(i, e) for i, e in enumerate(stream.events) if isinstance(e, dict)]
    if stream.decoded:
        from tpmtop.decode.listing import event_text

        kept = [e for e in stream.events if isinstance(e, dict)]
        rows = [msgspec.structs.replace(r, handles=t) if (t := event_text(e)) is not None else r
                for r, e in zip(rows, kept, strict=True)]
    return rows


def _session_text(s: Any) -> str:
    if isinstance(s, dict):  # tpmtop.capture/1: {"handle": "0x02000000", "attrs": 65}
        h, a = s.get("handle", "?"), s.get("attrs", 0)
    elif isinstance(s, (list, tuple)) and len(s) == 2:
        h, a = s
    else:
        return str(s)
    h = int(h, 16) if isinstance(h, str) and h.startswith("0x") else h
    if h == 0x40000009:
        return f"PW:{a:02x}" if isinstance(a, int) else f"PW:{a}"
    hs = f"{h:08x}" if isinstance(h, int) else str(h)
    return f"{hs}:{a:02x}" if isinstance(a, int) else f"{hs}:{a}"


def short_rc(rc: int | None, error: str | None, unknown: bool = False) -> str:
    if unknown and rc is None and not error:
        return "rc ?"  # answered, seen under the kernel probes: the response code is not traced
    if error or rc is None:
        return "no response"
    if rc == 0:
        return "ok"
    text = names.rc_text(rc)
    return f"0x{rc:03x} {text.split(':')[-1].strip()[:40]}"


def command_bytes(source: Any, row: StreamRow) -> tuple[bytes | None, bytes | None, str]:
    """(command, response, why not) for a stream row of a live or replay source."""
    if row.origin == Origin.MARK:
        return None, None, "a boundary, not a command"
    rec = source.recorder
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
    if not source.caps.live:
        # the replay source numbers the rows it shows: the last MAX_STREAM_ROWS events
        events = source.events()[-MAX_STREAM_ROWS:]
        try:
            e = events[int(row.key)]
        except (ValueError, IndexError):
            return None, None, "not in the capture"
        if not isinstance(e.get("command_hex"), str):
            if e.get("origin") == Origin.KERNEL:
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


def decode_history(source: Any, row: StreamRow) -> History | None:
    """Live: the commands before this row's, for the plaintext of tpmtop's own encrypted
    parameters (:mod:`tpmtop.decode.plaintext`); None for a replay (its sessions are over,
    their keys gone) or a row that is not a recorded command."""
    rec = source.recorder
    if rec is None or not row.key.isdigit():
        return None
    from tpmtop.decode.plaintext import recorder_history

    return recorder_history(rec, int(row.key))


def observed_text(ev: Event) -> str:
    """What is known of a command tpmtop only saw (the kernel's): the probes read its header."""
    cc = f" (0x{ev.cc:x})" if ev.cc is not None else ""
    return (f"it was seen under tpmtop's kernel probes, which read only the command's header, so there "
            f"are no bytes to decode. What is known: {ev.name}{cc}, {ev.cmd_size} bytes; response "
            f"{ev.rsp_size} bytes, {ev.rc_text}; {ev.wire_ns / 1000:,.1f} µs on the wire; sent by {ev.client}")
