"""What a ``tpmtop.capture/1`` document is: the schema, the one definition of an event and an
operation (their keys in the order the writer puts them), and validation.

Every other form of an event derives from here: the reader's canonical-line regular
expressions (:mod:`tpmtop.capture.read`) are built from :data:`EVENT_KEYS`/:data:`OP_KEYS`,
the writer (:mod:`tpmtop.capture.write`) orders members by them, and the builder
(:mod:`tpmtop.capture.build`) fills them from the recorder. The schema file
``tpmtop/schema/capture-1.json`` is the published contract; the fast checks below are sound
shortcuts of it (True only for what the schema accepts) and the schema itself words the error.

What a JSON schema cannot say, :func:`check_numbers` adds: every number is finite (Python's
JSON reader accepts NaN, Infinity and 1e400, which then poison every figure computed from
them), and a summary's ``count`` equals the sum of its histogram.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Annotated, Any

from tpmtop.errors import UsageError

SCHEMA_ID = "tpmtop.capture/1"
MAJOR = 1
# What this tpmtop writes; readers accept any minor of MAJOR. 1: the proxy's clients, programs
# and PCR_CHANGED members (tpmtop.proxy.report writes 1); 2: a bench's "floor" (tpmtop.bench).
MINOR = 2

# The members of one event and one operation, in the order the writer puts them (the reader's
# fast path expects exactly this order; see read.py).
EVENT_KEYS = ("t_ns", "command", "handles", "sessions", "rc", "rc_text", "wire_ns", "origin",
              "engine", "mode", "op", "op_seq")
OP_KEYS = ("op_seq", "engine", "mode", "op", "t_ns", "total_ns", "wire_ns", "ok")

_SCHEMA_RE = re.compile(r"tpmtop\.capture/(\d+)(?:\.(\d+))?\Z")


# -- the typed forms of a canonical line (msgspec) --------------------------------------------
# The reader's fast path decodes each line of the events/ops arrays with these (a C decoder,
# ~3x faster than a regular expression per element). Sound like the fast checks below: they
# accept only what the schema accepts (missing or unknown members, a float for an integer, a
# NaN, a number beyond 64 bits: a decode error, and the element takes the general path).
# handles/sessions stay raw JSON text, checked by a pattern (read.py) and pasted as they are.

import msgspec  # noqa: E402

_U64 = msgspec.Meta(ge=0, le=2**63 - 1)
_Name = Annotated[str, msgspec.Meta(min_length=1)]


class EventLine(msgspec.Struct, forbid_unknown_fields=True):
    t_ns: Annotated[int, _U64]
    command: _Name
    handles: msgspec.Raw
    sessions: msgspec.Raw
    rc: Annotated[int, msgspec.Meta(ge=0, le=0xFFFFFFFF)] | None
    rc_text: str
    wire_ns: Annotated[int, _U64]
    origin: _Name
    engine: str | None
    mode: str | None
    op: str | None
    op_seq: Annotated[int, _U64] | None
    # Members beyond the schema's core ones (command_hex/response_hex, a proxied event's
    # client, a kernel event's pid/comm/path): such a line takes the general path, which keeps
    # them here rather than dropping them (replay decodes from the bytes).
    extra: dict[str, Any] | None = None


class OpLine(msgspec.Struct, forbid_unknown_fields=True):
    op_seq: Annotated[int, _U64]
    engine: str
    mode: str
    op: str
    t_ns: Annotated[int, _U64]
    total_ns: Annotated[int, _U64]
    wire_ns: Annotated[int, _U64]
    ok: bool


# The bytes of a command and its response (event_bytes.py): hex, at most 64 KiB each (TPM
# buffers are 4 KiB on every chip we know; a pcapng frame holds 65,495 bytes of payload).
HEX_PATTERN = "^(?:[0-9a-fA-F]{2})*$"
HEX_MAX_CHARS = 2 * 65536
# The typed form checks the characters only (a character class: ~3 µs a string where the pairs'
# group took ~7, two strings an event); the reader checks the length is even (read.py).
HEX_CHARS_PATTERN = "^[0-9a-fA-F]*$"
_Hex = Annotated[str, msgspec.Meta(pattern=HEX_CHARS_PATTERN, max_length=HEX_MAX_CHARS)]
BYTES_KEYS = ("command_hex", "response_hex", "client")


class EventBytesLine(EventLine, forbid_unknown_fields=True):
    """An event line that may carry its bytes and its proxy client: the typed fast path takes
    these too (an imported capture has them on every event; the general path, a JSON decode
    and a schema check per event, cost an import's compare x5 the CPU of a bench capture's).
    After decoding, what is set is also in ``extra``, as the general path puts it."""

    command_hex: _Hex | msgspec.UnsetType = msgspec.UNSET
    response_hex: _Hex | msgspec.UnsetType = msgspec.UNSET
    # the schema says integer; proxy and import captures have always written the client as a
    # string (its id, or the peer's address) and event_ok accepts both: so does this
    client: Annotated[int, _U64] | str | msgspec.UnsetType = msgspec.UNSET


# One definition: the typed forms have exactly the members, in the order, of the keys above.
assert EventLine.__struct_fields__[:-1] == EVENT_KEYS and OpLine.__struct_fields__ == OP_KEYS  # + extra
assert EventBytesLine.__struct_fields__[len(EventLine.__struct_fields__):] == BYTES_KEYS


class CaptureError(UsageError):
    """A file that is not a valid capture (exit status 2)."""


# -- schema --------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    from importlib import resources

    doc: dict[str, Any] = json.loads(resources.files("tpmtop").joinpath("schema/capture-1.json").read_text("utf-8"))
    return doc


@lru_cache(maxsize=4)
def validator(part: str | None = None) -> Any:  # a jsonschema validator
    s = schema()
    if part is not None:
        # An item sub-schema that still resolves "#/$defs/…" against the whole document.
        s = {"$schema": s["$schema"], "$defs": s["$defs"], "$ref": f"#/$defs/{part}"}
    return _StrictIntegers(s, format_checker=None)


def _strict_validator_class() -> Any:
    """Draft 2020-12, except that "integer" means a JSON integer: the draft also accepts 5.0
    (and 1e-400, which reads as 0.0), and every consumer that counts or indexes with such a
    member then fails on a float (found by tests/cli/test_fuzz_cli.py)."""
    import jsonschema
    from jsonschema import validators

    checker = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _c, x: isinstance(x, int) and not isinstance(x, bool))
    return validators.extend(jsonschema.Draft202012Validator, type_checker=checker,
                             validators={"pattern": _pattern_within_length})


def _pattern_within_length(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
    """Draft 2020-12's "pattern", not run on a string over the same schema's maxLength (that
    error is said anyway): Python's re keeps ~115 bytes per repeat of the hex fields' group, so
    a 3 MB command_hex cost 170 MB of RSS to be refused."""
    from jsonschema.exceptions import ValidationError

    if not isinstance(instance, str):
        return
    limit = schema.get("maxLength")
    if isinstance(limit, int) and len(instance) > limit:
        return
    if re.search(pattern, instance) is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


class _Lazy:
    cls: Any = None

    def __call__(self, *a: Any, **kw: Any) -> Any:
        if self.cls is None:
            self.cls = _strict_validator_class()
        return self.cls(*a, **kw)


_StrictIntegers = _Lazy()


def path_text(prefix: str, path: Iterable[Any]) -> str:
    out = prefix
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out or "(top level)"


def first_error(part: str | None, doc: Any, prefix: str = "") -> str | None:
    """The schema error to show for ``doc`` (the whole capture, or one ``part`` such as
    "event"): the first in document order among the most specific ones."""
    from jsonschema.exceptions import best_match

    errors = list(validator(part).iter_errors(doc))
    if not errors:
        return None
    # best_match picks the most relevant of competing alternatives (e.g. inside anyOf);
    # among independent errors, the one earliest in the file reads most naturally.
    errors.sort(key=lambda e: [(0, p) if isinstance(p, int) else (1, str(p)) for p in e.absolute_path])
    e = best_match(errors[:1])
    return f"{path_text(prefix, e.absolute_path)}: {_short_message(e.message, e.instance)}"


MESSAGE_MAX = 200  # characters of a schema error's text; a value in it is cut to an excerpt


def _short_message(message: str, instance: Any) -> str:
    """jsonschema's message quotes the value whole (a 3 MB command_hex made a 3,000,085-character
    "one line"): the value becomes a short excerpt, and whatever else is long is cut."""
    from tpmtop.boundedread import excerpt

    quoted = repr(instance)
    if len(quoted) > 60 and quoted in message:
        message = message.replace(quoted, excerpt(instance), 1)
    return message if len(message) <= MESSAGE_MAX else excerpt(message, MESSAGE_MAX)


def check_version(value: Any) -> None:
    """The ``schema`` member: refuse what is not a capture or is of another major version."""
    m = _SCHEMA_RE.match(value) if isinstance(value, str) else None
    if m is None:
        raise CaptureError(f'not a tpmtop capture: "schema" is {json.dumps(value)[:60]}, expected "{SCHEMA_ID}"')
    if int(m.group(1)) != MAJOR:
        raise CaptureError(f"unsupported capture version {value}: this tpmtop reads {SCHEMA_ID} "
                           f"(any minor); a newer tpmtop may read it")
    if m.group(2) is not None:
        raise CaptureError(f'"schema": "{value}": the minor version goes in "minor", '
                           f'the schema string is "{SCHEMA_ID}"')


def json_type(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(v), "number")


# -- numbers a schema cannot refuse --------------------------------------------------------

def _non_finite(obj: Any, path: list[Any]) -> list[Any] | None:
    """The path to the first NaN/±Infinity in ``obj``, or None."""
    t = type(obj)
    if t is float:
        return None if math.isfinite(obj) else path
    if t is dict:
        for k, v in obj.items():
            if type(v) in (float, dict, list):
                hit = _non_finite(v, path + [k])
                if hit is not None:
                    return hit
    elif t is list:
        for i, v in enumerate(obj):
            if type(v) in (float, dict, list):
                hit = _non_finite(v, path + [i])
                if hit is not None:
                    return hit
    return None


def _summaries(doc: dict[str, Any]) -> Iterator[tuple[list[Any], Any]]:
    """(path, summary) of every latency summary in the runs."""
    for i, r in enumerate(doc.get("runs") or ()):
        for part in ("op_us", "wire_us", "host_us"):
            yield ["runs", i, part], r[part]
        for name, s in r["commands"].items():
            yield ["runs", i, "commands", name], s


def check_numbers(doc: dict[str, Any], prefix: str = "") -> None:
    """After the schema: every number finite, every histogram summing to its ``count``."""
    bad = _non_finite(doc, [])
    if bad is not None:
        raise CaptureError(f"{path_text(prefix, bad)}: not a finite number (NaN, Infinity and values "
                           f"beyond ±1.8e308 have no place in a capture)")
    for path, s in _summaries(doc):
        hist = s.get("histogram")
        if hist:
            total = sum(c for _, c in hist)
            if total != s["count"]:
                raise CaptureError(f"{path_text(prefix, path + ['count'])}: {s['count']} but its histogram "
                                   f"holds {total} samples")


def validate_head(doc: Any) -> None:
    """Everything but the ``events`` and ``ops`` elements (those are checked one by one)."""
    if not isinstance(doc, dict):
        raise CaptureError(f"not a tpmtop capture: the top level is a JSON {json_type(doc)}, not an object")
    if "schema" not in doc:
        raise CaptureError(f'not a tpmtop capture: no "schema" member (expected "{SCHEMA_ID}")')
    check_version(doc["schema"])
    head = {k: v for k, v in doc.items() if k not in ("events", "ops")}
    for key in ("events", "ops"):
        if key in doc and not isinstance(doc[key], list):
            head[key] = doc[key]  # let the schema word it
    msg = first_error(None, head)
    if msg:
        raise CaptureError(msg)
    check_numbers(head)


def check_element(key: str, item: Any, i: int) -> None:
    """One element of ``events`` (key "events") or ``ops``; raises CaptureError."""
    ok, part = (event_ok, "event") if key == "events" else (op_ok, "op")
    if not ok(item):
        msg = first_error(part, item, f"{key}[{i}]")
        if msg:
            raise CaptureError(msg)
        bad = _non_finite(item, [])
        if bad is not None:
            raise CaptureError(f"{path_text(f'{key}[{i}]', bad)}: not a finite number")


def validate_capture(doc: Any) -> None:
    """Raise :class:`CaptureError` (one line, first offending path) unless ``doc`` is a valid
    capture. ``events`` and ``ops`` are checked element by element (fast check first)."""
    validate_head(doc)
    for key in ("ops", "events"):
        for i, item in enumerate(doc.get(key) or ()):
            check_element(key, item, i)


# -- fast element checks (sound: True only for what the schema accepts) ---------------------

_HANDLE = re.compile(r"0x[0-9a-fA-F]{8}\Z")


def _int(v: Any, lo: int = 0, hi: int | None = None) -> bool:
    return type(v) is int and v >= lo and (hi is None or v <= hi)


def _str_or_none(v: Any) -> bool:
    return v is None or type(v) is str


def event_ok(e: Any) -> bool:
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
    for k in ("command_hex", "response_hex"):
        if k in e and not _hex_ok(e[k]):
            return False
    # Members a newer minor adds may hold anything, but never a non-finite number.
    for k, v in e.items():
        if type(v) in (float, dict, list) and k not in ("handles", "sessions") and _non_finite(v, []) is not None:
            return False
    return True


# HEX_PATTERN's meaning (pairs of hex digits) as an even length and one character class: a
# repeated group made the regex ~7× slower on a command's bytes (1 KB: 13 against 2 µs), and
# this check runs on every event a capture writes or reads.
_HEX_CHARS = re.compile(r"[0-9a-fA-F]*\Z")


def _hex_ok(v: Any) -> bool:
    return type(v) is str and len(v) <= HEX_MAX_CHARS and not len(v) % 2 and _HEX_CHARS.match(v) is not None


def op_ok(o: Any) -> bool:
    if type(o) is not dict:
        return False
    try:
        if not (_int(o["op_seq"]) and type(o["engine"]) is str and type(o["mode"]) is str
                and type(o["op"]) is str and _int(o["t_ns"]) and _int(o["total_ns"])
                and _int(o["wire_ns"]) and type(o["ok"]) is bool):
            return False
    except KeyError:
        return False
    return all(not (type(v) in (float, dict, list) and _non_finite(v, []) is not None) for v in o.values())
