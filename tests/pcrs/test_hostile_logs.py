"""Bad logs: read as far as they go with the place and the reason named, or exit 2 with one
line naming the offset — never a traceback, a hang, or unbounded memory. Each bad log is made
from a real fixture (tests/fixtures/pcrs) by one edit."""

from __future__ import annotations

import json
import os
import re
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.pcrs import PCR_FIXTURES
from tests.helpers.processes import run_tpmtop
from tpmtop.pcrs import eventlog, events, replay
from tpmtop.pcrs.eventlog import EventLogError

OVMF = (PCR_FIXTURES / "ovmf" / "binary_bios_measurements").read_bytes()
SEABIOS = (PCR_FIXTURES / "seabios" / "binary_bios_measurements").read_bytes()


def _pcrs(path, *more):
    r = run_tpmtop("pcrs", "--eventlog", str(path), "--no-tpm", *more)
    assert "Traceback" not in r.stderr
    return r


def _json(path):
    r = _pcrs(path, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _offsets(buf: bytes) -> list[int]:
    return [e.offset for e in eventlog.parse(buf).events]


def test_truncated_log_is_a_partial_replay_naming_the_offset(tmp_path):
    offs = _offsets(OVMF)
    cut = offs[10] + 40  # inside event 10's digests
    f = tmp_path / "cut"
    f.write_bytes(OVMF[:cut])
    doc = _json(f)
    log = doc["eventlog"]
    assert log["partial"] is True and log["stop_offset"] == offs[10] and log["events"] == 10
    assert "truncated" in log["stop_reason"]
    text = _pcrs(f).stdout
    assert f"PARTIAL: read up to byte {offs[10]}" in text
    # what was read is replayed: PCR 7 (events 4-9, the Secure Boot variables) as in the whole log
    whole = replay.replay(eventlog.parse(OVMF))
    assert doc["replay"]["sha256"]["7"] == whole.values["sha256"][7].hex()


def test_event_size_of_4_gib_stops_there(tmp_path):
    offs = _offsets(SEABIOS)
    buf = bytearray(SEABIOS)
    ev = eventlog.parse(SEABIOS).events[3]
    size_at = ev.offset + 8 + 4 + sum(2 + len(d) for d in ev.digests.values())
    assert struct.unpack_from("<I", buf, size_at)[0] == len(ev.data)
    struct.pack_into("<I", buf, size_at, 0xFFFFFFFF)
    f = tmp_path / "huge"
    f.write_bytes(bytes(buf))
    log = _json(f)["eventlog"]
    assert log["stop_offset"] == offs[3] and "4294967295" in log["stop_reason"] and log["events"] == 3


def test_a_record_claiming_a_billion_digests_stops_there(tmp_path):
    offs = _offsets(SEABIOS)
    buf = bytearray(SEABIOS)
    struct.pack_into("<I", buf, offs[5] + 8, 10**9)
    f = tmp_path / "billion"
    f.write_bytes(bytes(buf))
    log = _json(f)["eventlog"]
    assert log["stop_offset"] == offs[5] and "1000000000 digests" in log["stop_reason"]


def test_a_header_claiming_a_billion_banks_is_exit_2_at_its_offset(tmp_path):
    buf = bytearray(SEABIOS)
    struct.pack_into("<I", buf, 32 + 24, 10**9)  # numberOfAlgorithms
    f = tmp_path / "banks"
    f.write_bytes(bytes(buf))
    r = _pcrs(f)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "offset 32" in r.stderr


def test_unknown_event_type_is_named_and_still_replayed(tmp_path):
    offs = _offsets(SEABIOS)
    buf = bytearray(SEABIOS)
    struct.pack_into("<I", buf, offs[2] + 4, 0x1234)
    f = tmp_path / "unknown"
    f.write_bytes(bytes(buf))
    r = _pcrs(f, "--events")
    assert r.returncode == 0
    assert "unknown event type 0x00001234" in r.stdout
    assert _json(f)["replay"] == _json(PCR_FIXTURES / "seabios" / "binary_bios_measurements")["replay"]


def test_vendor_info_in_the_spec_id_header_is_read_past(tmp_path):
    ev0 = eventlog.parse(SEABIOS).events[0]
    data = bytearray(ev0.data)
    vendor = 16 + 8 + 4 + 4 * 4  # signature, class/versions, count, 4 banks
    assert data[vendor] == 0
    data[vendor] = 7
    data += b"VENDOR!"
    buf = SEABIOS[:28] + struct.pack("<I", len(data)) + bytes(data) + SEABIOS[32 + len(ev0.data):]
    f = tmp_path / "vendor"
    f.write_bytes(buf)
    doc = _json(f)
    assert doc["eventlog"]["partial"] is False
    assert any("7 bytes of vendor information" in n for n in doc["eventlog"]["notes"])
    assert doc["replay"] == _json(PCR_FIXTURES / "seabios" / "binary_bios_measurements")["replay"]


def test_an_event_for_pcr_4294967295_is_skipped_not_fatal(tmp_path):
    offs = _offsets(SEABIOS)
    buf = bytearray(SEABIOS)
    struct.pack_into("<I", buf, offs[2], 0xFFFFFFFF)
    f = tmp_path / "pcr"
    f.write_bytes(bytes(buf))
    doc = _json(f)
    assert doc["skipped"] == [f"event 2 (byte {offs[2]}) names PCR 4294967295, which no TPM has: not replayed"]
    assert doc["skipped_count"] == 1
    # said in the text too (issue 50: it was silently ignored there)
    assert "1 event names a PCR past 23 and is not replayed" in _pcrs(f).stdout


@pytest.mark.parametrize("what", ["empty", "directory", "missing", "random", "zero"])
def test_not_a_log_is_exit_2_in_one_line(tmp_path, what):
    f = tmp_path / what
    if what == "empty":
        f.write_bytes(b"")
    elif what == "directory":
        f.mkdir()
    elif what == "random":
        f.write_bytes(bytes((i * 7919 + 13) % 251 for i in range(4096)))
    elif what == "zero":
        f = "/dev/zero"
    r = _pcrs(f)
    assert r.returncode == 2, r.stdout
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("tpmtop")
    assert "Traceback" not in r.stderr


def test_a_fifo_with_no_writer_is_refused_not_waited_on(tmp_path):
    """issue 50: a FIFO with no writer blocked `pcrs` forever; it is refused (exit 2, one line)
    without being opened for a blocking read."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = _pcrs(fifo)
    assert r.returncode == 2, r.stdout
    assert r.stderr.count("\n") == 1 and "is a FIFO, not a regular file" in r.stderr


def test_dev_zero_is_refused_as_a_device():
    with pytest.raises(EventLogError, match="character device"):
        eventlog.parse_file("/dev/zero")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=600), st.integers(0, len(OVMF)), st.integers(0, len(OVMF)))
def test_any_edit_of_a_real_log_parses_or_is_refused(junk, at, cut):
    buf = OVMF[:at] + junk + OVMF[at + len(junk):cut if cut > at else len(OVMF)]
    try:
        log = eventlog.parse(buf)
    except EventLogError as e:
        assert "offset" in str(e)
        return
    assert (log.stop_offset is None) == (log.stop_reason is None)
    for ev in log.events:
        events.describe(ev.type, ev.data)  # never raises
    replay.replay(log)


def _fields(log):
    return ([(e.index, e.offset, e.pcr, e.type, e.layout, e.raw, e.data) for e in log.events],
            log.format, log.banks, log.notes, log.stop_offset, log.stop_reason, log.padding, log.startup_locality)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.integers(0, len(OVMF)), st.integers(0, len(OVMF)),
       st.sampled_from([40, 64, 97, 256]), st.integers(0, 3000))
def test_a_log_read_a_window_at_a_time_parses_as_the_whole_log(junk, at, cut, window, zeros):
    """parse_file reads a large log a window at a time (and each event again where used):
    with windows of 40-256 bytes, any edit of a real log (junk, a cut, zero padding) gives the
    same events, notes, stop and padding as the whole log parsed at once, or the same refusal."""
    import tempfile

    buf = OVMF[:at] + junk + OVMF[at + len(junk):cut if cut > at else len(OVMF)] + bytes(zeros)
    with tempfile.NamedTemporaryFile(suffix=".log") as f:
        f.write(buf)
        f.flush()
        old = eventlog.WINDOW, eventlog.WINDOWED_FROM
        eventlog.WINDOW, eventlog.WINDOWED_FROM = window, 0
        try:
            try:
                whole = _fields(eventlog.parse(buf))
            except EventLogError:
                whole = None
            try:
                windowed = _fields(eventlog.parse_file(f.name))
            except EventLogError:
                windowed = None
        finally:
            eventlog.WINDOW, eventlog.WINDOWED_FROM = old
    assert windowed == whole


def test_a_long_replay_shows_progress_on_a_terminal_only(tmp_path):
    """A 150,000-event log (benchmarks/pcrs_replay.py's shape) and a 50,000-entry IMA list take
    well over a second: a progress bar on a terminal; piped, none."""
    import sys

    sys.path.insert(0, str(PCR_FIXTURES.parents[2] / "benchmarks"))
    import random

    from pcrs_replay import write_ima, write_log  # benchmarks/pcrs_replay.py

    from tests.helpers.processes import run_on_pty

    log, imalist = tmp_path / "log", tmp_path / "ima"
    rng = random.Random(1)
    write_log(str(log), 150_000, rng)
    write_ima(str(imalist), 50_000, rng)
    status, term, out = run_on_pty("pcrs", "--no-tpm", "--json", "--eventlog", str(log), "--ima", str(imalist))
    assert status == 0 and json.loads(out)["eventlog"]["events"] == 150_000
    assert re.search(r"(reading the event log|reading IMA's list|replaying)", term), term
    piped = _pcrs(log, "--json", "--ima", str(imalist))
    assert piped.returncode == 0 and piped.stderr == ""


@pytest.mark.skipif(os.path.exists("/sys/kernel/security/tpm0/binary_bios_measurements"),
                    reason="this machine has a firmware event log")
def test_no_log_and_no_tpm_is_exit_2_and_no_log_with_a_tpm_shows_the_pcrs_alone():
    r = run_tpmtop("pcrs", "--no-tpm")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "nothing to replay or compare" in r.stderr
    r = run_tpmtop("pcrs", "--sim")
    assert r.returncode == 0, r.stderr
    assert "the TPM's PCRs alone" in r.stdout and "DOES NOT MATCH" not in r.stdout
