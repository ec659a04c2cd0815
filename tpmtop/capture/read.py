"""Reading a ``tpmtop.capture/1`` file: streamed, validated, one line per error.

A capture is the unit that leaves the machine (a bug report, ``tpmtop compare``, Perfetto,
Prometheus), so every reader validates it (:mod:`tpmtop.capture.spec`) and a bad file is one
line naming the first offending path (exit status 2), never a traceback.

Size: a capture with ``--events`` holds one object per TPM command, ~250 bytes each, so a
million commands is ~250 MB of JSON — as Python dicts that would be over 1 GB. The reader
therefore streams: the top-level object is parsed member by member, and the ``events`` and
``ops`` arrays element by element, each element checked and handed to a callback (or kept, for
small files). The writer puts one element per line in a fixed key order; the reader has a
regular-expression fast path for exactly that form (a match is schema-valid by construction),
and the general JSON path (Python's json, refusing NaN/Infinity/1e400) for anything else.

Why not msgspec or another fast JSON library: see docs/benchmarks.md ("Captures"); in short, none
streams the elements of one array out of a file, and per line the regular expression here is
as fast as a typed decode while never converting the numbers an exporter only copies.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Callable
from typing import Any

import msgspec

from tpmtop import strictjson
from tpmtop.capture.spec import (
    BYTES_KEYS,
    EVENT_KEYS,
    OP_KEYS,
    CaptureError,
    EventBytesLine,
    EventLine,
    OpLine,
    check_element,
    check_version,
    validate_head,
)

MAX_FILE_BYTES = 4 * 1024**3  # a 1M-event capture is ~250 MB; beyond this it is not a capture
MAX_VALUE_CHARS = 64 * 1024**2  # any single member other than events/ops (runs, tpm …)
READ_CHUNK = 4 * 1024 * 1024

# -- rows: what exporters get for each event / op -------------------------------------------
# Every field is JSON text: strings with their quotes, numbers as digits, ``null``. An exporter
# pastes them into JSON output as they are, and the fast path never converts a number it only
# copies: on a million events every conversion is a measurable fraction of a second.
# event row: the values of model.EVENT_KEYS in that order, then <ignored>
# op row:    the values of model.OP_KEYS in that order, then <ignored>

_J = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def event_row(e: dict[str, Any]) -> tuple[Any, ...]:
    """The row of a validated event dict (the general path)."""
    return (str(int(e["t_ns"])), _J(e["command"]), _J(e.get("handles", [])), _J(e.get("sessions", [])),
            "null" if e["rc"] is None else str(int(e["rc"])), _J(e.get("rc_text")),
            str(int(e["wire_ns"])), _J(e["origin"]), _J(e.get("engine")), _J(e.get("mode")),
            _J(e.get("op")), "null" if e.get("op_seq") is None else str(int(e["op_seq"])), None)


def op_row(o: dict[str, Any]) -> tuple[Any, ...]:
    return (str(int(o["op_seq"])), _J(o["engine"]), _J(o["mode"]), _J(o["op"]), str(int(o["t_ns"])),
            str(int(o["total_ns"])), str(int(o["wire_ns"])), "true" if o["ok"] else "false", None)


# The canonical one-line forms written by write_capture (separators "," and ":", the key
# order of model.EVENT_KEYS / OP_KEYS). Every piece is constrained as tightly as the schema:
# JSON integers without leading zeros (at most 19 digits: longer ones take the general path),
# strings without escapes or control characters, handles 0x + 8 hex digits, attrs 0..255.
# rc's upper bound is checked after the match. Group "sep" is the "," or "]" after.
_INT = r"(?:0|[1-9][0-9]{0,18})"
_STR = r'"[^"\\\x00-\x1f]*"'
_STR1 = r'"[^"\\\x00-\x1f]+"'
_H = r'"0x[0-9a-fA-F]{8}"'
_SESS = r'\{"handle":' + _H + r',"attrs":(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\}'
_EVENT_VALUES = {"t_ns": _INT, "command": _STR1, "handles": r"\[(?:" + _H + r"(?:," + _H + r")*)?\]",
                 "sessions": r"\[(?:" + _SESS + r"(?:," + _SESS + r")*)?\]", "rc": "null|" + _INT,
                 "rc_text": _STR, "wire_ns": _INT, "origin": _STR1, "engine": "null|" + _STR,
                 "mode": "null|" + _STR, "op": "null|" + _STR, "op_seq": "null|" + _INT}
_OP_VALUES = {"op_seq": _INT, "engine": _STR, "mode": _STR, "op": _STR, "t_ns": _INT, "total_ns": _INT,
              "wire_ns": _INT, "ok": "true|false"}
_END = r"\}[ \t\r\n]*(?P<sep>[,\]])[ \t\r\n]*"


def _line_re(keys: tuple[Any, ...], values: dict[str, Any]) -> re.Pattern[str]:
    return re.compile(r"\{" + ",".join(f'"{k}":({values[k]})' for k in keys) + _END)


_EVENT_RE = _line_re(EVENT_KEYS, _EVENT_VALUES)
# handles/sessions of a typed line stay raw JSON: pasted as they are once they match these.
_HANDLES_B = re.compile(("(?:" + _EVENT_VALUES["handles"] + r")\Z").encode())
_SESSIONS_B = re.compile(("(?:" + _EVENT_VALUES["sessions"] + r")\Z").encode())
_EVENT_DEC = msgspec.json.Decoder(EventBytesLine)
_UNSET = msgspec.UNSET
_OP_DEC = msgspec.json.Decoder(OpLine)
_CACHE_MAX = 4096  # distinct strings / lists kept as JSON text (ever-new ones must not grow memory)
_OP_RE = _line_re(OP_KEYS, _OP_VALUES)
_WS = re.compile(r"[ \t\r\n]*")


class _ListCheck:
    """The raw handles/sessions lists of typed lines, checked against the schema's pattern
    once per distinct list (they repeat across a million events)."""

    def __init__(self) -> None:
        self.seen: dict[bytes, bool] = {}

    def ok(self, e: EventLine) -> bool:
        seen = self.seen
        for raw, pattern in ((e.handles, _HANDLES_B), (e.sessions, _SESSIONS_B)):
            b = bytes(raw)
            good = seen.get(b)
            if good is None:
                if len(seen) >= _CACHE_MAX:
                    seen.clear()
                good = seen[b] = pattern.match(b) is not None
            if not good:
                return False
        return True


def event_line(e: dict[str, Any]) -> EventLine:
    """A validated event dict (the general path) in the typed form."""
    return EventLine(e["t_ns"], e["command"], msgspec.Raw(_J(e.get("handles", [])).encode()),
                     msgspec.Raw(_J(e.get("sessions", [])).encode()), e["rc"], e.get("rc_text") or "",
                     e["wire_ns"], e["origin"], e.get("engine"), e.get("mode"), e.get("op"), e.get("op_seq"),
                     {k: v for k, v in e.items() if k not in EVENT_KEYS} or None)


def op_line(o: dict[str, Any]) -> OpLine:
    return OpLine(*(o[k] for k in OP_KEYS))


# -- the streaming reader ------------------------------------------------------------------

class CaptureReader:
    """Parse and validate a capture file, streaming ``events`` and ``ops``.

    ``on_event(row)`` / ``on_op(row)``: called for each element (rows as documented above);
    when a callback is None the elements are kept as dicts in the returned document.
    ``typed=True``: the callbacks get :class:`~tpmtop.capture.spec.EventLine` /
    ``OpLine`` objects instead of rows of JSON text (their ``handles``/``sessions`` are raw
    JSON, ``msgspec.Raw``).

    Why two forms: an exporter pasting JSON text (chrome-trace) is fastest with the regular
    expression, whose groups are that text; a reader that only validates (compare,
    openmetrics, boot) or wants values (profiles, replay) is fastest with msgspec decoding
    each line (see docs/benchmarks.md, "Captures").
    ``read()`` returns the document (without the streamed arrays) after full validation.
    """

    def __init__(self, path: str | os.PathLike[str], on_event: Callable[[Any], None] | None = None,
                 on_op: Callable[[Any], None] | None = None, typed: bool = False) -> None:
        self.path = os.fspath(path)
        self.typed = typed
        self.on_event = on_event
        self.on_op = on_op
        self.n_events = 0
        self.n_ops = 0
        self.has_events = False
        self.has_ops = False
        self.member_order: list[str] = []
        self.head: dict[str, Any] = {}
        self._dec = strictjson.decoder()

    # buffer management: self.buf[self.pos:] is unread text; self._line0 is the line number
    # of self.buf[0], self._bytes the number of bytes decoded so far (for error positions).
    def _open(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise CaptureError(f"{self.path}: no such file") from None
        except OSError as e:
            raise CaptureError(f"{self.path}: {e.strerror}") from None
        if not os.path.isfile(self.path):
            raise CaptureError(f"{self.path}: not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise CaptureError(f"{self.path}: {st.st_size / 1e9:.1f} GB is too big for a capture "
                               f"(limit {MAX_FILE_BYTES // 1024**3} GiB)")
        if st.st_size == 0:
            raise CaptureError(f"{self.path}: empty file, not a capture")
        try:
            self._f = open(self.path, "rb")  # noqa: SIM115 - the reader owns it (close())
        except OSError as e:
            raise CaptureError(f"{self.path}: {e.strerror}") from None
        self._udec = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf = ""
        self.pos = 0
        self.eof = False
        self._line0 = 1
        self._bytes = 0

    def _fill(self, want: int = READ_CHUNK) -> bool:
        """Append at least ``want`` more bytes of text; False at end of file."""
        if self.eof:
            return False
        data = self._f.read(want)
        final = len(data) < want
        try:
            text = self._udec.decode(data, final=final)
        except UnicodeDecodeError as e:
            off = self._bytes + e.start
            bad = data[e.start:e.start + 1].hex()
            raise CaptureError(f"{self.path}: not UTF-8 text: byte 0x{bad} at offset {off} "
                               f"(a capture is UTF-8 JSON)") from None
        self._bytes += len(data)
        if self.pos:
            self._line0 += self.buf.count("\n", 0, self.pos)
            self.buf = self.buf[self.pos:] + text
            self.pos = 0
        else:
            self.buf += text
        if final:
            self.eof = True
        return bool(text) or not final

    def _where(self, i: int) -> str:
        line = self._line0 + self.buf.count("\n", 0, i)
        col = i - self.buf.rfind("\n", 0, i)
        return f"line {line} column {col}"

    def _fail(self, what: str, i: int | None = None) -> None:
        i = self.pos if i is None else i
        raise CaptureError(f"{self.path}: {what} ({self._where(i)})")

    def _ws(self) -> None:
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]  # \s* always matches
            if self.pos < len(self.buf) or not self._fill():
                return

    def _peek(self) -> str:
        self._ws()
        if self.pos >= len(self.buf):
            self._fail("unexpected end of file (truncated?)")
        return self.buf[self.pos]

    def _expect(self, ch: str, what: str) -> None:
        if self._peek() != ch:
            self._fail(f"not valid JSON: expected {what}, found {self.buf[self.pos]!r}")
        self.pos += 1

    def _value(self, where: str = "") -> Any:
        """The JSON value at self.pos; ``where`` is its path in the capture (for messages)."""
        self._ws()
        want = READ_CHUNK
        while True:
            try:
                v, end = self._dec.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                if not self.eof and len(self.buf) - self.pos < MAX_VALUE_CHARS:
                    self._fill(want)  # maybe just cut by the buffer: read more, parse again
                    want *= 2
                    continue
                if self.eof and (e.pos >= len(self.buf) - 1 or e.msg.startswith("Unterminated string")):
                    self._fail("unexpected end of file (truncated?)", e.pos)
                if not self.eof:
                    self._fail(f"a single JSON value over {MAX_VALUE_CHARS // 1024**2} MiB: "
                               f"not a capture", self.pos)
                self._fail(f"not valid JSON: {e.msg}", e.pos)
            except RecursionError:
                self._fail("not a capture: JSON nested too deeply")
            except strictjson.NotFinite as e:
                self._not_finite(str(e), where)
            except ValueError as e:  # e.g. an integer of more than 4300 digits
                self._fail(f"not a capture: {str(e).split(';')[0][:80]}")
            if end == len(self.buf) and not self.eof:
                # A number at the very end of the buffer may continue in the next chunk.
                self._fill(want)
                continue
            self.pos = end
            return v

    def _not_finite(self, token: str, where: str) -> None:
        # Parse the value again, leniently, only to name the member that holds the number.
        from tpmtop.capture.spec import _non_finite, path_text

        try:
            v, _ = json.JSONDecoder().raw_decode(self.buf, self.pos)
            path = _non_finite(v, [])
        except (ValueError, RecursionError):
            path = None
        at = self.buf.find(token, self.pos)
        name = path_text(where, path) + ": " if path is not None and where else ""
        self._fail(f"{name}{token[:40]} is not a finite number (NaN, Infinity and values beyond "
                   f"±1.8e308 have no place in a capture)", at if at >= 0 else None)

    def read(self) -> dict[str, Any]:
        self._open()
        try:
            return self._read()
        finally:
            self._f.close()
            self.buf = ""

    def _read(self) -> dict[str, Any]:
        self._fill()
        if self.buf.startswith("\ufeff"):  # a BOM from a Windows editor is not worth refusing
            self.pos = 1
        if self._peek() != "{":
            if self.buf[self.pos] == "[":
                self._fail("not a tpmtop capture: the top level is a JSON array, not an object")
            # Give a JSON error when it is not JSON at all.
            self._fail(f"not valid JSON: unexpected {self.buf[self.pos]!r}")
        self.pos += 1
        doc: dict[str, Any] = {}
        # The members read so far, for a callback that needs the head (t0_unix_ns, tpm) while
        # the events stream: the writer puts them before the arrays.
        self.head = doc
        if self._peek() == "}":
            self.pos += 1
        else:
            while True:
                if self._peek() != '"':
                    self._fail("not valid JSON: expected a member name in double quotes")
                key = self._value()
                if key in doc or key in self.member_order:
                    self._fail(f'not a capture: member "{key}" appears twice')
                self.member_order.append(key)
                self._expect(":", "':'")
                if key in ("events", "ops") and self._peek() == "[":
                    kept = self._array(key)
                    if kept is not None:
                        doc[key] = kept
                else:
                    doc[key] = self._value(key)
                    if key == "schema":
                        # Refuse another major early, before streaming hundreds of MB.
                        try:
                            check_version(doc[key])
                        except CaptureError as e:
                            raise CaptureError(f"{self.path}: {e}") from None
                c = self._peek()
                self.pos += 1
                if c == "}":
                    break
                if c != ",":
                    self._fail(f"not valid JSON: expected ',' or '}}', found {c!r}", self.pos - 1)
        self._ws()
        if self.pos < len(self.buf):
            self._fail("not valid JSON: extra data after the capture")
        # The streamed arrays were checked element by element; validate the rest.
        try:
            validate_head(doc)
        except CaptureError as e:
            raise CaptureError(f"{self.path}: {e}") from None
        return doc

    def _array(self, key: str) -> list[Any] | None:
        is_events = key == "events"
        if is_events:
            self.has_events = True
        else:
            self.has_ops = True
        self.pos += 1  # '['
        if is_events:
            self._events_begin()
        kept: list[Any] | None = [] if (self.on_event if is_events else self.on_op) is None else None
        if self._peek() == "]":
            self.pos += 1
            return kept
        self._elements(key, kept)
        return kept

    # Hooks for a subclass that shares the work on the events array with another process
    # (tpmtop.export.split_reader): the plain reader just reads on.
    def _events_begin(self) -> None:
        """Called right after the '[' of the events array."""

    def _top_up(self, is_events: bool) -> int | None:
        """Called between two elements when less than 64 KiB of text is buffered: read more
        (returns None), or return how many elements were read elsewhere up to and including
        the array's ']' (the reader then continues after the array)."""
        self._fill()
        return None

    def _elements(self, key: str, kept: list[Any] | None) -> None:
        """The elements of an array from the first one through its closing ']'."""
        is_events = key == "events"
        cb = self.on_event if is_events else self.on_op
        rx = _EVENT_RE if is_events else _OP_RE
        i = 0
        match = rx.match
        # Fast paths, for what write_capture writes (one element per line, its key order):
        # typed, the line decoded by msgspec into model.EventLine/OpLine; else the regular
        # expression (its groups are the row's JSON text). Anything else (another layout, a
        # minified file, a member out of order): the general JSON path.
        typed = self.typed and cb is not None
        decode = _EVENT_DEC.decode if is_events else _OP_DEC.decode
        lists_ok: Callable[[Any], bool] | None = _ListCheck().ok if is_events else None
        call: Callable[[Any], None] = cb if cb is not None else _drop
        DecodeError = msgspec.DecodeError
        ws = _WS.match
        while True:
            if not self.eof and len(self.buf) - self.pos < 65536:
                done = self._top_up(is_events)
                if done is not None:  # the rest of the array was read elsewhere (a subclass)
                    i += done
                    break
            if typed:
                buf, pos = self.buf, self.pos
                nl = buf.find("\n", pos)
                if nl > pos:
                    comma = buf[nl - 1] == ","
                    try:
                        obj = decode(buf[pos:nl - 1] if comma else buf[pos:nl])
                    except DecodeError:
                        obj = None
                    if isinstance(obj, EventBytesLine) and (obj.command_hex is not _UNSET or obj.client is not _UNSET
                                                            or obj.response_hex is not _UNSET):
                        # bytes and client also in extra, where the general path puts them
                        obj.extra = {k: v for k in BYTES_KEYS if (v := getattr(obj, k)) is not _UNSET}
                        if len(obj.extra.get("command_hex", "")) & 1 or len(obj.extra.get("response_hex", "")) & 1:
                            obj = None  # half a byte: the general path says where (the schema's pattern)
                    if obj is not None and (lists_ok is None or lists_ok(obj)):
                        sep = None
                        if comma:
                            self.pos = nl + 1
                            sep = ","
                        else:  # the last element: then only whitespace and the ']'
                            j = ws(buf, nl).end()  # type: ignore[union-attr]  # \s* always matches
                            if j < len(buf) and buf[j] == "]":
                                self.pos = j + 1
                                sep = "]"
                        if sep is not None:
                            call(obj)
                            i += 1
                            if sep == "]":
                                break
                            continue
            m = match(self.buf, self.pos) if cb is not None and not typed else None
            row = None
            if m is not None:
                row = m.groups()
                # The regex bounds everything but rc's maximum (4294967295, 10 digits).
                if is_events and len(row[4]) > 9 and row[4] != "null" and int(row[4]) > 0xFFFFFFFF:
                    row = None
            if m is not None and row is not None:
                sep = row[-1]
                self.pos = m.end()
                call(row)
            else:
                start = self.pos
                v = self._value(f"{key}[{i}]")
                try:
                    check_element(key, v, i)
                except CaptureError as e:
                    raise CaptureError(f"{self.path}: {e} ({self._where(start)})") from None
                if cb is None:
                    assert kept is not None  # no callback: the array is kept
                    kept.append(v)
                elif typed:
                    cb(event_line(v) if is_events else op_line(v))
                else:
                    cb(event_row(v) if is_events else op_row(v))
                sep = self._peek()
                self.pos += 1
                if sep not in ",]":
                    self._fail(f"not valid JSON: expected ',' or ']' in \"{key}\", found {sep!r}", self.pos - 1)
            i += 1
            if sep == "]":
                break
        if is_events:
            self.n_events = i
        else:
            self.n_ops = i


def load_capture(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a capture; ``events``/``ops`` (if any) are kept as lists of dicts.

    For captures too big to hold in memory use :class:`CaptureReader` with callbacks.
    """
    return CaptureReader(path).read()


def load_summary(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a capture but drop ``events`` and ``ops`` (compare, openmetrics)."""
    r = CaptureReader(path, on_event=_drop, on_op=_drop, typed=True)
    doc = r.read()
    doc["_n_events"] = r.n_events
    return doc


def _drop(_row: Any) -> None:
    pass
