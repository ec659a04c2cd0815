"""The capture schema, the reader's two paths (fast regex, general JSON) and the writer."""

from __future__ import annotations

import itertools
import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.paths import TESTS
from tpmtop import capture
from tpmtop.capture import (
    CaptureError,
    CaptureReader,
    event_row,
    events_json,
    load_capture,
    read,
    validate_capture,
    write_capture,
)
from tpmtop.capture import spec as model
from tpmtop.capture.write import _canonical
from tpmtop.errors import TpmError

SAMPLE = TESTS / "captures" / "sample-1.0.json"


def test_schema_is_valid_draft_2020_12():
    jsonschema.Draft202012Validator.check_schema(capture.schema())
    assert capture.schema()["$schema"].endswith("/2020-12/schema")


def test_sample_loads_and_round_trips(tmp_path):
    doc = load_capture(SAMPLE)
    out = tmp_path / "c.json"
    write_capture(out, doc)
    assert load_capture(out) == doc
    # the written form is the canonical one: the reader's fast path takes every element
    seen = []
    r = CaptureReader(out, on_event=seen.append, on_op=lambda row: None)
    r.read()
    assert [row[:-1] for row in seen] == [event_row(e)[:-1] for e in doc["events"]]


def test_a_newer_minor_with_unknown_members_loads(tmp_path):
    doc = json.loads(SAMPLE.read_text())
    doc["minor"] = 7
    doc["new_top_level"] = {"anything": [1, 2]}
    doc["runs"][0]["new_run_field"] = "x"
    doc["runs"][0]["op_us"]["p999"] = 1.5
    doc["tpm"]["new_tpm_field"] = True
    doc["events"][0]["new_event_field"] = 1
    p = tmp_path / "newer.json"
    p.write_text(json.dumps(doc))
    got = load_capture(p)
    assert got["minor"] == 7 and got["events"][0]["new_event_field"] == 1
    write_capture(tmp_path / "again.json", got)  # and survives a rewrite
    assert load_capture(tmp_path / "again.json") == got


def test_a_bench_capture_carries_its_floor_as_minor_2(bench_captures):
    """Issue 55 item 4: a bench measures the machine's speed through its run (a 1-byte
    GetRandom's round trips, a batch before each round and after the last) and writes it as
    ``floor``, a minor-2 member; the schema refuses a floor that is not round trips."""
    doc = load_capture(bench_captures.path("extend-none-reuse"))
    assert doc["minor"] == model.MINOR == 2
    blocks = doc["floor"]["blocks_us"]
    # -n 20, --batch 10: two rounds, a block before each and one after the last, 10 round trips each
    assert len(blocks) == 3 and all(len(b) == 10 and all(t > 0 for t in b) for b in blocks)
    assert "GetRandom" in doc["floor"]["what"]
    # the floor is not the workload's: no GetRandom among the recorded commands
    assert not any(e["command"] == "TPM2_CC_GetRandom" for e in doc["events"])
    bad = dict(doc, floor={"what": "x", "blocks_us": [[-1.0]]})
    with pytest.raises(CaptureError, match=r"floor\.blocks_us\[0\]\[0\]"):
        validate_capture(bad)


def test_minor_in_the_schema_string_is_refused_with_advice():
    doc = json.loads(SAMPLE.read_text())
    doc["schema"] = "tpmtop.capture/1.2"
    with pytest.raises(CaptureError, match='goes in "minor"'):
        validate_capture(doc)


def test_validate_names_the_first_offending_path():
    doc = json.loads(SAMPLE.read_text())
    doc["runs"][1]["wire_us"]["p99"] = "slow"
    doc["events"][5]["rc"] = -1
    with pytest.raises(CaptureError) as e:
        validate_capture(doc)
    assert str(e.value) == "runs[1].wire_us.p99: 'slow' is not of type 'number'"
    doc["runs"][1]["wire_us"]["p99"] = 3.0
    with pytest.raises(CaptureError) as e:
        validate_capture(doc)
    assert str(e.value).startswith("events[5].rc: -1 is less than the minimum of 0")


def test_write_capture_refuses_an_invalid_capture_and_keeps_the_old_file(tmp_path):
    p = tmp_path / "c.json"
    p.write_text("old")
    doc = json.loads(SAMPLE.read_text())
    doc["events"][10]["t_ns"] = "soon"
    with pytest.raises(CaptureError, match=r"events\[10\]\.t_ns"):
        write_capture(p, doc)
    assert p.read_text() == "old"


# -- the fast paths must never accept what the schema refuses ------------------------------

_name = st.one_of(st.none(), st.text(max_size=8), st.integers(-2, 3))
_int = st.one_of(st.integers(-3, 2**33), st.floats(allow_nan=False, allow_infinity=False), st.none(),
                 st.text(max_size=3))
_handle = st.one_of(st.integers(0, 2**32 - 1).map(lambda h: f"0x{h:08x}"), st.text(max_size=11))
_event = st.fixed_dictionaries(
    {"t_ns": _int, "command": st.one_of(st.sampled_from(["TPM2_CC_PCR_Extend", "", "x\"y", "é"]), _int),
     "handles": st.one_of(st.lists(_handle, max_size=3), st.none()),
     "sessions": st.lists(st.fixed_dictionaries({"handle": _handle, "attrs": _int}), max_size=2),
     "rc": _int, "rc_text": st.one_of(st.text(max_size=5), st.none()), "wire_ns": _int,
     "origin": _name, "engine": _name, "mode": _name, "op": _name, "op_seq": _int},
)


@settings(max_examples=400, deadline=None)
@given(_event)
def test_event_fast_paths_are_sound(e):
    valid = model.validator("event").is_valid(e)
    if model.event_ok(e):
        assert valid, e
    line = _canonical(e, model.EVENT_KEYS) + ","
    m = read._EVENT_RE.match(line)
    if m is not None and not (len(m.group(5)) > 9 and int(m.group(5)) > 0xFFFFFFFF):
        assert valid, line
        # and the fast row is what the general path makes of the same event
        assert m.groups()[:-1] == event_row(e)[:-1]
    # the typed (msgspec) fast path: the same promise
    try:
        typed = read._EVENT_DEC.decode(line[:-1])
    except Exception as exc:  # a decode error sends the line down the other paths
        assert type(exc).__name__ in ("DecodeError", "ValidationError"), exc
        typed = None
    if typed is not None and read._ListCheck().ok(typed):
        assert valid, line
        # and it is what the general path makes of the same event
        back = read.event_line(e)
        assert [getattr(typed, k) for k in model.EVENT_KEYS if k not in ("handles", "sessions")] == \
            [getattr(back, k) for k in model.EVENT_KEYS if k not in ("handles", "sessions")]
        assert (bytes(typed.handles), bytes(typed.sessions)) == (bytes(back.handles), bytes(back.sessions))


def test_fast_path_accepts_the_usual_event():
    e = {"t_ns": 12, "command": "TPM2_CC_PCR_Extend", "handles": ["0x00000010"],
         "sessions": [{"handle": "0x02000000", "attrs": 33}], "rc": 0x98e, "rc_text": "tpm:session(1): x",
         "wire_ns": 1, "origin": "workload", "engine": "native", "mode": "reuse", "op": "extend", "op_seq": 3}
    assert model.event_ok(e)
    assert read._EVENT_RE.match(_canonical(e, model.EVENT_KEYS) + "]")


# -- events from a real TPM -----------------------------------------------------------------

def test_events_json_from_a_real_swtpm(tpm, tmp_path):
    from tpmtop.tpm import commands

    commands.get_properties(tpm.transport, 0x100, 8)
    with pytest.raises(TpmError):
        commands.flush_context(tpm.transport, 0x80FFFFF0)  # nothing loaded there: an error rc
    evs = tpm.recorder.events()
    assert len(evs) >= 2
    doc = {"schema": capture.SCHEMA_ID, "created": "2025-11-02T10:00:00+00:00", "tool": {"version": "t"},
           "host": {"hostname": "h", "kernel": "k"}, "tpm": tpm.tpm_json(), "runs": [],
           "events": events_json(evs, evs[0].t_ns)}
    p = tmp_path / "c.json"
    write_capture(p, doc)
    got = load_capture(p)["events"]
    assert [e["command"] for e in got] == [ev.name for ev in evs]
    assert got[0]["t_ns"] == 0 and all(b["t_ns"] >= a["t_ns"] for a, b in itertools.pairwise(got))
    flush = got[-1]
    assert flush["command"] == "TPM2_CC_FlushContext" and flush["rc"] != 0
    assert flush["rc_text"] == evs[-1].rc_text and flush["rc_text"] != "success"
