"""The capture file ``tpmtop.capture/1``: reading, validating and writing it.

A capture is the unit that leaves the machine (a bug report, ``tpmtop compare``, Perfetto,
Prometheus), so every reader validates it against ``tpmtop/schema/capture-1.json`` and a bad
file is one line naming the first offending path (exit status 2), never a traceback.

Versioning: ``"schema": "tpmtop.capture/1"`` is the major version; an optional integer
``"minor"`` counts backwards-compatible additions (new optional members). A /1 reader loads
every minor and ignores members it does not know; an unknown major is refused.

Size: a capture with ``--events`` holds one object per TPM command, ~250 bytes each, so a
million commands is ~250 MB of JSON — as Python dicts that would be over 1 GB. The reader
therefore streams: the top-level object is parsed member by member, and the ``events`` and
``ops`` arrays element by element, each element checked and handed to a callback (or kept, for
small files). The writer puts one element per line in a fixed key order; the reader has a
regular-expression fast path for exactly that form (a match is schema-valid by construction),
and the general JSON path for anything else.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from functools import lru_cache
from typing import Any, Callable, Iterable

from tpmtop.errors import UsageError

SCHEMA_ID = "tpmtop.capture/1"
MAJOR = 1
MINOR = 0  # what this tpmtop writes; readers accept any minor of MAJOR

MAX_FILE_BYTES = 4 * 1024**3  # a 1M-event capture is ~250 MB; beyond this it is not a capture
MAX_VALUE_CHARS = 64 * 1024**2  # any single member other than events/ops (runs, tpm …)
_CHUNK = 4 * 1024 * 1024

_SCHEMA_RE = re.compile(r"tpmtop\.capture/(\d+)(?:\.(\d+))?\Z")


class CaptureError(UsageError):
    """A file that is not a valid capture (exit status 2)."""


# -- schema --------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def schema() -> dict:
    from importlib import resources

    return json.loads(resources.files("tpmtop").joinpath("schema/capture-1.json").read_text("utf-8"))


@lru_cache(maxsize=4)
def _validator(part: str | None = None):
    import jsonschema

    s = schema()
    if part is not None:
        # An item sub-schema that still resolves "#/$defs/…" against the whole document.
        s = {"$schema": s["$schema"], "$defs": s["$defs"], "$ref": f"#/$defs/{part}"}
    return jsonschema.Draft202012Validator(s, format_checker=None)


def _path_text(prefix: str, path: Iterable) -> str:
    out = prefix
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out or "(top level)"


def _first_error(validator, doc, prefix: str = ""):
    """The error to show: the first in document order among the most specific ones."""
    from jsonschema.exceptions import best_match

    errors = list(validator.iter_errors(doc))
    if not errors:
        return None
    # best_match picks the most relevant of competing alternatives (e.g. inside anyOf);
    # among independent errors, the one earliest in the file reads most naturally.
    errors.sort(key=lambda e: [(0, p) if isinstance(p, int) else (1, str(p)) for p in e.absolute_path])
    e = best_match(errors[:1] if errors else errors)
    return f"{_path_text(prefix, e.absolute_path)}: {e.message}"


def check_version(value: Any) -> None:
    """The ``schema`` member: refuse what is not a capture or is of another major version."""
    if not isinstance(value, str):
        raise CaptureError(f'not a tpmtop capture: "schema" is {json.dumps(value)[:60]}, expected "{SCHEMA_ID}"')
    m = _SCHEMA_RE.match(value)
    if m is None:
        raise CaptureError(f'not a tpmtop capture: "schema" is {json.dumps(value)[:60]}, expected "{SCHEMA_ID}"')
    if int(m.group(1)) != MAJOR:
        raise CaptureError(f"unsupported capture version {value}: this tpmtop reads {SCHEMA_ID} "
                           f"(any minor); a newer tpmtop may read it")
    if m.group(2) is not None:
        raise CaptureError(f'"schema": "{value}": the minor version goes in "minor", '
                           f'the schema string is "{SCHEMA_ID}"')


def validate_capture(doc: Any) -> None:
    """Raise :class:`CaptureError` (one line, first offending path) unless ``doc`` is a valid
    capture. ``events`` and ``ops`` are checked element by element (fast path first)."""
    if not isinstance(doc, dict):
        raise CaptureError(f"not a tpmtop capture: the top level is a JSON {_json_type(doc)}, not an object")
    if "schema" not in doc:
        raise CaptureError(f'not a tpmtop capture: no "schema" member (expected "{SCHEMA_ID}")')
    check_version(doc["schema"])
    head = {k: v for k, v in doc.items() if k not in ("events", "ops")}
    for key in ("events", "ops"):
        if key in doc and not isinstance(doc[key], list):
            head[key] = doc[key]  # let the schema word it
    msg = _first_error(_validator(), head)
    if msg:
        raise CaptureError(msg)
    for key, ok, part in (("ops", _op_ok, "op"), ("events", _event_ok, "event")):
        for i, item in enumerate(doc.get(key) or ()):
            if not ok(item):
                msg = _first_error(_validator(part), item, f"{key}[{i}]")
                if msg:
                    raise CaptureError(msg)


def _json_type(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(v), "number")


# -- fast element checks (sound: True only for what the schema accepts) ---------------------

_HANDLE = re.compile(r"0x[0-9a-fA-F]{8}\Z")


def _int(v, lo=0, hi=None) -> bool:
    return type(v) is int and v >= lo and (hi is None or v <= hi)


def _str_or_none(v) -> bool:
    return v is None or type(v) is str


def _event_ok(e: Any) -> bool:
    if type(e) is not dict:
        return False
    try:
        if not (_int(e["t_ns"]) and type(e["command"]) is str and e["command"]
                and _int(e["wire_ns"]) and type(e["origin"]) is str and e["origin"]):
            return False
        rc = e["rc"]
        if rc is not None and not _int(rc, 0, 0xFFFFFFFF):
            return False
    except KeyError:
        return False
    if "rc_text" in e and type(e["rc_text"]) is not str:
        return False
    for k in ("engine", "mode", "op"):
        if k in e and not _str_or_none(e[k]):
            return False
    if "op_seq" in e and not (e["op_seq"] is None or _int(e["op_seq"])):
        return False
    hs = e.get("handles", ())
    if type(hs) is not list and "handles" in e:
        return False
    for h in hs:
        if type(h) is not str or not _HANDLE.match(h):
            return False
    ss = e.get("sessions", ())
    if type(ss) is not list and "sessions" in e:
        return False
    for s in ss:
        if type(s) is not dict or type(s.get("handle")) is not str or not _HANDLE.match(s["handle"]) \
                or not _int(s.get("attrs"), 0, 255):
            return False
    return True


def _op_ok(o: Any) -> bool:
    if type(o) is not dict:
        return False
    try:
        return (_int(o["op_seq"]) and type(o["engine"]) is str and type(o["mode"]) is str
                and type(o["op"]) is str and _int(o["t_ns"]) and _int(o["total_ns"])
                and _int(o["wire_ns"]) and type(o["ok"]) is bool)
    except KeyError:
        return False


# -- rows: what exporters get for each event / op -------------------------------------------
# Every field is JSON text: strings with their quotes, numbers as digits, ``null``. An exporter
# pastes them into JSON output as they are, and the fast path never converts a number it only
# copies: on a million events every conversion is a measurable fraction of a second.
# event row: (t_ns, command, handles, sessions, rc, rc_text, wire_ns, origin, engine, mode, op,
#             op_seq, <ignored>)   — the key order of the canonical line
# op row:    (op_seq, engine, mode, op, t_ns, total_ns, wire_ns, ok, <ignored>)

_J = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def event_row(e: dict) -> tuple:
    """The row of a validated event dict (the general path)."""
    return (str(int(e["t_ns"])), _J(e["command"]), _J(e.get("handles", [])), _J(e.get("sessions", [])),
            "null" if e["rc"] is None else str(int(e["rc"])), _J(e.get("rc_text")),
            str(int(e["wire_ns"])), _J(e["origin"]), _J(e.get("engine")), _J(e.get("mode")),
            _J(e.get("op")), "null" if e.get("op_seq") is None else str(int(e["op_seq"])), None)


def op_row(o: dict) -> tuple:
    return (str(int(o["op_seq"])), _J(o["engine"]), _J(o["mode"]), _J(o["op"]), str(int(o["t_ns"])),
            str(int(o["total_ns"])), str(int(o["wire_ns"])), "true" if o["ok"] else "false", None)


# The canonical one-line forms written by write_capture (separators "," and ":", this key
# order). Every piece is constrained as tightly as the schema: JSON integers without leading
# zeros, strings without escapes or control characters, handles 0x + 8 hex digits, attrs
# 0..255. rc's upper bound is checked after the match. Group "sep" is the "," or "]" after.
_INT = r"(?:0|[1-9][0-9]*)"
_STR = r'"[^"\\\x00-\x1f]*"'
_STR1 = r'"[^"\\\x00-\x1f]+"'
_H = r'"0x[0-9a-fA-F]{8}"'
_SESS = r'\{"handle":' + _H + r',"attrs":(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\}'
_EVENT_RE = re.compile(
    r'\{"t_ns":(' + _INT + r'),"command":(' + _STR1 + r'),'
    r'"handles":(\[(?:' + _H + r'(?:,' + _H + r')*)?\]),'
    r'"sessions":(\[(?:' + _SESS + r'(?:,' + _SESS + r')*)?\]),'
    r'"rc":(null|' + _INT + r'),"rc_text":(' + _STR + r'),"wire_ns":(' + _INT + r'),'
    r'"origin":(' + _STR1 + r'),"engine":(null|' + _STR + r'),"mode":(null|' + _STR + r'),'
    r'"op":(null|' + _STR + r'),"op_seq":(null|' + _INT + r')\}[ \t\r\n]*(?P<sep>[,\]])[ \t\r\n]*')
_OP_RE = re.compile(
    r'\{"op_seq":(' + _INT + r'),"engine":(' + _STR + r'),"mode":(' + _STR + r'),"op":(' + _STR + r'),'
    r'"t_ns":(' + _INT + r'),"total_ns":(' + _INT + r'),"wire_ns":(' + _INT + r'),'
    r'"ok":(true|false)\}[ \t\r\n]*(?P<sep>[,\]])[ \t\r\n]*')
_WS = re.compile(r"[ \t\r\n]*")


# -- the streaming reader ------------------------------------------------------------------

class CaptureReader:
    """Parse and validate a capture file, streaming ``events`` and ``ops``.

    ``on_event(row)`` / ``on_op(row)``: called for each element (rows as documented above);
    when a callback is None the elements are kept as dicts in the returned document.
    ``read()`` returns the document (without the streamed arrays) after full validation.
    """

    def __init__(self, path: str | os.PathLike, on_event: Callable | None = None,
                 on_op: Callable | None = None):
        self.path = os.fspath(path)
        self.on_event = on_event
        self.on_op = on_op
        self.n_events = 0
        self.n_ops = 0
        self.has_events = False
        self.has_ops = False
        self.member_order: list[str] = []
        self._dec = json.JSONDecoder()
        # Splitting the events array with a helper process (see on_events_start / split_events).
        self.on_events_start: Callable | None = None
        self._limit: int | None = None  # no read goes past this byte offset while a split is on
        self._split = None

    # buffer management: self.buf[self.pos:] is unread text; self._line0 is the line number
    # of self.buf[0], self._bytes the number of bytes decoded so far (for error positions).
    def _open(self):
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
            self._f = open(self.path, "rb")
        except OSError as e:
            raise CaptureError(f"{self.path}: {e.strerror}") from None
        self._udec = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf = ""
        self.pos = 0
        self.eof = False
        self._line0 = 1
        self._bytes = 0

    def _fill(self, want: int = _CHUNK) -> bool:
        """Append at least ``want`` more bytes of text; False at end of file."""
        if self.eof:
            return False
        if self._limit is not None:
            room = self._limit - self._bytes
            if room <= 0:
                # The parser needs text past the split point in some other state than "between
                # two events": the helper's work does not fit, go on alone.
                self._drop_split()
            else:
                want = min(want, room)
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
            self.pos = _WS.match(self.buf, self.pos).end()
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

    def _value(self) -> Any:
        self._ws()
        want = _CHUNK
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
            if end == len(self.buf) and not self.eof:
                # A number at the very end of the buffer may continue in the next chunk.
                self._fill(want)
                continue
            self.pos = end
            return v

    def read(self) -> dict:
        self._open()
        try:
            return self._read()
        finally:
            self._f.close()
            self.buf = ""

    def _read(self) -> dict:
        self._fill()
        if self.buf.startswith("\ufeff"):  # a BOM from a Windows editor is not worth refusing
            self.pos = 1
        if self._peek() != "{":
            if self.buf[self.pos] == "[":
                self._fail("not a tpmtop capture: the top level is a JSON array, not an object")
            # Give a JSON error when it is not JSON at all.
            self._fail(f"not valid JSON: unexpected {self.buf[self.pos]!r}")
        self.pos += 1
        doc: dict = {}
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
                    doc[key] = self._value()
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
            validate_capture(doc)
        except CaptureError as e:
            raise CaptureError(f"{self.path}: {e}") from None
        return doc

    def _array(self, key: str) -> list | None:
        is_events = key == "events"
        if is_events:
            self.has_events = True
        else:
            self.has_ops = True
        self.pos += 1  # '['
        if is_events and self.on_events_start is not None and self.on_event is not None:
            self.on_events_start(self, self._byte_offset())
        kept: list | None = [] if (self.on_event if is_events else self.on_op) is None else None
        if self._peek() == "]":
            self.pos += 1
            return kept
        self._elements(key, kept)
        return kept

    def _elements(self, key: str, kept: list | None) -> None:
        """The elements of an array from the first one through its closing ']'."""
        is_events = key == "events"
        cb = self.on_event if is_events else self.on_op
        rx = _EVENT_RE if is_events else _OP_RE
        ok = _event_ok if is_events else _op_ok
        part = "event" if is_events else "op"
        i = 0
        match = rx.match
        while True:
            if not self.eof and len(self.buf) - self.pos < 65536:
                if self._bytes != self._limit:
                    self._fill()
                elif self.pos == len(self.buf) and is_events:
                    # At the split point, between two events: the helper process has done the
                    # rest of this array (or failed, and then this process goes on alone).
                    done = self._join_split()
                    if done is not None:
                        i += done
                        break
                    self._fill()
            m = match(self.buf, self.pos) if cb is not None else None
            row = None
            if m is not None:
                row = m.groups()
                # The regex bounds everything but rc's maximum (4294967295, 10 digits).
                if is_events and len(row[4]) > 9 and row[4] != "null" and int(row[4]) > 0xFFFFFFFF:
                    row = None
            if row is not None:
                sep = row[-1]
                self.pos = m.end()
                cb(row)
            else:
                start = self.pos
                v = self._value()
                if not ok(v):
                    msg = _first_error(_validator(part), v, f"{key}[{i}]")
                    if msg:
                        raise CaptureError(f"{self.path}: {msg} ({self._where(start)})")
                if cb is None:
                    kept.append(v)
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

    # -- splitting the events array between two processes ----------------------------------
    # An exporter that spends microseconds per event can use a second core: when the events
    # array starts (on_events_start), it picks a line start S further on (one event per line,
    # as write_capture puts them), forks a helper that parses and converts the events from S
    # to the end of the array (read_events_tail), and calls split_events(S, handler). This
    # reader then reads no further than S. If it gets there between two events of the array,
    # handler.join(self) returns the helper's (events, end byte, newlines) and reading resumes
    # after the array; if the helper failed (e.g. an invalid event: this process then parses
    # it again and reports it with the right position) or the parser needs the text past S in
    # any other state, handler.abandon() is called and this process reads on by itself. So
    # the helper's result is used only where it is exactly what this process would compute.

    def _byte_offset(self) -> int:
        """The file offset of self.buf[self.pos]."""
        pending = len(self._udec.getstate()[0])  # bytes of a character cut by the last read
        return self._bytes - pending - len(self.buf[self.pos:].encode("utf-8"))

    def split_events(self, offset: int, handler) -> bool:
        """Read no further than ``offset`` (see above); False if that is not possible."""
        here = self._byte_offset()
        if offset <= here:
            return False
        if offset < self._bytes:
            # Already read past it (a small file is read in one go): keep the text before it
            # and read the file from there.
            try:
                keep = self.buf[self.pos:].encode("utf-8")[:offset - here].decode("utf-8")
            except UnicodeDecodeError:  # not a character boundary, so not a line start either
                return False
            self.buf = self.buf[:self.pos] + keep
            self._f.seek(offset)
            self._udec = codecs.getincrementaldecoder("utf-8")("strict")
            self._bytes = offset
            self.eof = False
        self._limit = offset
        self._split = handler
        return True

    def _drop_split(self) -> None:
        handler, self._split, self._limit = self._split, None, None
        if handler is not None:
            handler.abandon()

    def _join_split(self) -> int | None:
        handler = self._split
        done = handler.join(self)
        if done is None:
            self._drop_split()
            return None
        n, end, newlines = done
        self._split = self._limit = None
        # Resume after the array the helper finished.
        self._line0 += self.buf.count("\n", 0, self.pos) + newlines
        self._f.seek(end)
        self._udec = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf = ""
        self.pos = 0
        self._bytes = end
        return n

    def read_events_tail(self, offset: int) -> tuple[int, int, int]:
        """(The helper's part.) Parse the events from ``offset`` — the start of an element of
        the events array — through the array's ']'; returns (events, the byte offset after
        the array, newlines read)."""
        self._open()
        try:
            self._f.seek(offset)
            self._bytes = offset
            self.has_events = True
            self._fill()
            self._elements("events", None)
            newlines = self._line0 - 1 + self.buf.count("\n", 0, self.pos)
            return self.n_events, self._byte_offset(), newlines
        finally:
            self._f.close()
            self.buf = ""


def load_capture(path: str | os.PathLike) -> dict:
    """Read and validate a capture; ``events``/``ops`` (if any) are kept as lists of dicts.

    For captures too big to hold in memory use :class:`CaptureReader` with callbacks.
    """
    return CaptureReader(path).read()


def load_summary(path: str | os.PathLike) -> dict:
    """Read and validate a capture but drop ``events`` and ``ops`` (compare, openmetrics)."""
    r = CaptureReader(path, on_event=_drop, on_op=_drop)
    doc = r.read()
    doc["_n_events"] = r.n_events
    return doc


def _drop(_row) -> None:
    pass


# -- writing -------------------------------------------------------------------------------

_EVENT_KEYS = ("t_ns", "command", "handles", "sessions", "rc", "rc_text", "wire_ns", "origin",
               "engine", "mode", "op", "op_seq")
_OP_KEYS = ("op_seq", "engine", "mode", "op", "t_ns", "total_ns", "wire_ns", "ok")


def _canonical(d: dict, keys: tuple) -> str:
    # The reader's fast path needs exactly this key order; unknown keys (a newer minor) are
    # kept after them, which only sends that element down the general path.
    out = {k: d.get(k) for k in keys}
    for k, v in d.items():
        if k not in out:
            out[k] = v
    return _J(out)


def write_capture(path: str | os.PathLike, capture: dict) -> None:
    """Validate ``capture`` and write it atomically. ``events``/``ops`` may be any iterable
    (a generator streams a big capture without holding it twice)."""
    from tpmtop.atomic import open_atomic

    head = {k: v for k, v in capture.items() if k not in ("events", "ops")}
    head.setdefault("schema", SCHEMA_ID)
    validate_capture(head)
    head_text = json.dumps(head, indent=1, ensure_ascii=False)
    assert head_text.endswith("}")
    with open_atomic(path, text=False, background_sync=True) as f:
        f.write(head_text[:-1].rstrip().encode("utf-8"))
        # ops before events: an exporter streaming the file then knows the operations before
        # it meets their commands.
        for key, keys, ok, part in (("ops", _OP_KEYS, _op_ok, "op"), ("events", _EVENT_KEYS, _event_ok, "event")):
            items = capture.get(key)
            if items is None:
                continue
            f.write(f',\n "{key}": [\n'.encode())
            batch: list[str] = []
            first = True
            for i, item in enumerate(items):
                if not ok(item):
                    msg = _first_error(_validator(part), item, f"{key}[{i}]")
                    if msg:
                        raise CaptureError(msg)
                batch.append(_canonical(item, keys))
                if len(batch) >= 4096:
                    f.write(((",\n" if not first else "") + ",\n".join(batch)).encode("utf-8"))
                    first = False
                    batch.clear()
            if batch:
                f.write(((",\n" if not first else "") + ",\n".join(batch)).encode("utf-8"))
            f.write(b"\n ]")
        f.write(b"\n}\n")


def events_json(events: list, t0_ns: int | None = None) -> list[dict]:
    """Recorder events as capture ``events`` elements; ``t_ns`` becomes an offset from
    ``t0_ns`` (default: the first event). Events before ``t0_ns`` are dropped: offsets are
    non-negative by the schema."""
    from tpmtop.tpm import names

    if not events:
        return []
    if t0_ns is None:
        t0_ns = events[0].t_ns
    cc_name = names.cc_name
    rc_text = names.rc_text  # cached by rc
    cc_cache: dict = {}
    h_cache: dict = {}

    def hx(h: int) -> str:
        s = h_cache.get(h)
        if s is None:
            s = h_cache[h] = f"0x{h:08x}"
        return s

    out = []
    append = out.append
    for ev in events:
        t = ev.t_ns - t0_ns
        if t < 0:
            continue
        cc = ev.cc
        name = cc_cache.get(cc)
        if name is None:
            name = cc_cache[cc] = cc_name(cc)
        append({
            "t_ns": t, "command": name,
            "handles": [hx(h) for h in ev.handles] if ev.handles else [],
            "sessions": [{"handle": hx(sh), "attrs": a} for sh, a in ev.sessions] if ev.sessions else [],
            "rc": ev.rc, "rc_text": ev.error or rc_text(ev.rc), "wire_ns": ev.wire_ns,
            "origin": ev.origin, "engine": ev.engine, "mode": ev.mode, "op": ev.op,
            "op_seq": ev.op_seq,
        })
    return out
