"""The import's event lines, made as text from each exchange (tpmtop/importers/observed.py's
_EventText) and spooled, against the way every other capture is written: the event dict,
checked and encoded by the writer. The same bytes, the same errors."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpmtop.capture import CaptureError
from tpmtop.capture.write import capture_chunks, checked_line
from tpmtop.importers import observed
from tpmtop.importers.observed import ObservedExchange, capture_from_exchanges, capture_from_stream, event_dict

T0 = 1_762_077_600_000_000_000


def _msg(tag: int, code: int, body: bytes = b"") -> bytes:
    return struct.pack(">HII", tag, 10 + len(body), code) + body


GETRANDOM = _msg(0x8001, 0x17B, b"\x00\x08")
# PCR_Extend(PCR 16) with a password session (attrs 1) and one digest
PCR_EXTEND = _msg(0x8002, 0x182, struct.pack(">II", 16, 9) + struct.pack(">IHBH", 0x40000009, 0, 1, 0)
                  + struct.pack(">IH", 1, 0x000B) + bytes(32))
OK = _msg(0x8001, 0)
AUTH_FAIL = _msg(0x8001, 0x98E)


def exchanges() -> list[ObservedExchange]:
    """Every shape an import or the kernel view makes, the odd ones included."""
    return [
        ObservedExchange(T0, 120_000, GETRANDOM, _msg(0x8001, 0, b"\x00\x08" + bytes(8)), "127.0.0.1:40001"),
        ObservedExchange(T0 + 5, 90_000, PCR_EXTEND, OK, "127.0.0.1:40002"),
        ObservedExchange(T0 + 9, 80_000, PCR_EXTEND, AUTH_FAIL, "127.0.0.1:40001"),
        ObservedExchange(T0 + 10, -3, GETRANDOM, OK, "127.0.0.1:40001"),  # a wire time clamped at 0
        ObservedExchange(T0 + 20, 0, GETRANDOM, None, "127.0.0.1:40002"),  # never answered
        ObservedExchange(T0 + 30, 7, GETRANDOM, b"\x80\x01\x00", "cli\"ent ü"),  # a response cut short
        ObservedExchange(T0 + 40, 7, b"\x80\x01", OK, None),  # a command cut short: no code
        ObservedExchange(T0 + 50, 7, _msg(0x8001, 0x12345678), OK, "127.0.0.1:40001"),  # a code no TPM has
        ObservedExchange(T0 + 60, 7, _msg(0x8001, 0x17B), _msg(0x8001, 0xFFFFFFFF), None),
        # the checked way: no bytes (the kernel view), a code without a response, members of its own
        ObservedExchange(T0 + 70, 500, None, None, None, cc=0x182, rc=0, answered=True),
        ObservedExchange(T0 + 80, 500, GETRANDOM, None, "127.0.0.1:40001", rc=0x101),
        ObservedExchange(T0 + 90, 500, GETRANDOM, OK, None, extra={"pid": 42, "comm": "tpm2_getrandom"}),
        ObservedExchange(T0 + 100, 500, GETRANDOM, OK, None, extra={"expected": True}),
    ]


def _text(cap: dict) -> str:
    """The capture as written, without its ``created`` member (the time of the writing)."""
    doc = b"".join(capture_chunks(cap)).decode()
    return "\n".join(line for line in doc.splitlines() if not line.startswith(' "created"'))


@pytest.mark.parametrize("clients", [True, False])
def test_a_streamed_capture_is_written_as_the_event_dicts_would_be(clients):
    xs = exchanges()
    if not clients:
        for x in xs:
            x.client = None
    streamed = capture_from_stream(iter(xs), origin="imported", source="pcap:x", clients=lambda: clients)
    held = capture_from_exchanges(xs, origin="imported", source="pcap:x")
    assert _text(streamed) == _text(held)
    # and read back as event dicts: those the list holds (twice: the spool reads again)
    assert list(streamed["events"]) == held["events"] == list(streamed["events"])
    assert len(streamed["events"]) == len(xs)


def test_bytes_too_long_for_the_hex_fail_as_the_writer_says():
    """A message beyond 64 KiB: the same CaptureError, naming the same event."""
    big = _msg(0x8001, 0, bytes(65_536))
    xs = [ObservedExchange(T0, 1, GETRANDOM, OK), ObservedExchange(T0 + 1, 1, GETRANDOM, big)]
    with pytest.raises(CaptureError) as held:
        _text(capture_from_exchanges(xs, origin="imported", source="pcap:x"))
    with pytest.raises(CaptureError) as streamed:
        capture_from_stream(iter(xs), origin="imported", source="pcap:x", clients=lambda: False)
    assert str(streamed.value) == str(held.value) and "events[1].response_hex" in str(held.value)


def _checked(x: ObservedExchange) -> str:
    """The middle of the line the writer makes of ``x``'s event dict (as _EventText's)."""
    e = event_dict(x, 0, "imported")
    e.pop("client", None)
    e["t_ns"] = 0
    line = checked_line("events", e, 0)
    assert line.startswith('{"t_ns":0,') and line.endswith("}")
    return line[len('{"t_ns":0,'):-1]


@st.composite
def commands(draw: st.DrawFn) -> bytes:
    """A command of any code, 0–4 handles, maybe a session area of 0–3 sessions, any rest."""
    cc = draw(st.sampled_from([0x17B, 0x182, 0x176, 0x165, 0x161, 0x17F]) | st.integers(0, 2**32 - 1))
    handles = draw(st.lists(st.integers(0, 2**32 - 1), max_size=4))
    body = b"".join(struct.pack(">I", h) for h in handles)
    sessions = draw(st.none() | st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 255)), max_size=3))
    if sessions is not None:
        area = b"".join(struct.pack(">IHBH", h, 0, a, 0) for h, a in sessions)
        body += struct.pack(">I", len(area)) + area
    body += draw(st.binary(max_size=40))
    return _msg(0x8002 if sessions is not None else 0x8001, cc, body)


@settings(max_examples=300, deadline=None)
@given(cmd=commands(), rsp=st.none() | st.binary(max_size=30), rc=st.integers(0, 2**32 - 1),
       wire_ns=st.integers(-10, 2**40))
def test_the_text_is_the_writers_line_for_any_exchange(cmd, rsp, rc, wire_ns):
    if rsp is not None and len(rsp) >= 10:
        rsp = struct.pack(">HII", 0x8001, len(rsp), rc) + rsp[10:]
    x = ObservedExchange(T0, wire_ns, cmd, rsp)
    text, name, got_rc = observed._EventText("imported").make(x, 0)
    assert text == _checked(x)
    e = json.loads("{" + text + "}")
    assert (name, got_rc) == (e["command"], e["rc"])


def test_the_caches_start_over_when_full():
    """Distinct handles past the cache's bound: each text still its own exchange's."""
    maker = observed._EventText("imported")
    for h in range(5000):
        x = ObservedExchange(T0, 1, _msg(0x8001, 0x165, struct.pack(">I", h)), OK)
        assert maker.make(x, h)[0] == _checked(x)


def test_ordinary_exchanges_are_made_as_text_not_checked(monkeypatch):
    """The made-as-text way is the import's speed: only the odd exchanges may leave it."""
    def refuse(self, x, i):
        raise AssertionError(f"exchange {i} took the checked way")

    monkeypatch.setattr(observed._EventText, "_checked", refuse)
    ordinary = [x for x in exchanges() if x.command is not None and not x.extra and x.rc is None]
    assert len(ordinary) == 9
    capture_from_stream(iter(ordinary), origin="imported", source="pcap:x", clients=lambda: True)
