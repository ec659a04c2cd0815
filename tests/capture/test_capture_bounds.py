"""Captures and pcaps that are hostile in size (issue 50): a 3 MB hex field is named in a short
line, not echoed; pcapng headers whose lengths are 0 or 4 bytes, and pcaps of millions of
one-byte records, are refused in one line, exit 2, in bounded memory."""

from __future__ import annotations

import struct

import pytest

from tests.capture.test_pcap_bad_input import GETRANDOM_CMD, _capture_with_bytes
from tests.helpers.bounded import assert_refused, run_measured


@pytest.mark.parametrize("hexed, says", [("zz" * 1_500_000, "is too long"), ("80" * 1_500_000, "is too long"),
                                         ("8" * 3_000_001, "is too long")],
                         ids=["3mb-not-hex", "3mb-hex", "3mb-odd"])
@pytest.mark.parametrize("command", [("export", "--format", "pcapng", "-o", "{out}"), ("compare", "{cap}")],
                         ids=["export", "compare"])
def test_a_3_mb_hex_field_is_named_in_a_short_line(tmp_path, hexed, says, command):
    """Over the schema's maxLength: said as too long, with an excerpt (the pattern is not run on
    megabytes: Python's re held ~170 MB for it), in under 200 MB."""
    cap = tmp_path / "cap.json"
    _capture_with_bytes(cap, command_hex=hexed, at=5)
    args = [a.format(out=tmp_path / "out.pcapng", cap=cap) for a in command]
    m = run_measured(args[0], str(cap), *args[1:])
    assert_refused(m, "events[5].command_hex", says, f"({len(hexed):,} characters)")


def test_a_short_hex_field_is_still_quoted_whole(tmp_path):
    """Where the value is short the line still shows it whole (the excerpt does not fire)."""
    cap = tmp_path / "cap.json"
    _capture_with_bytes(cap, command_hex=GETRANDOM_CMD + "0", at=9)
    m = run_measured("compare", str(cap), str(cap))
    assert_refused(m, f"'{GETRANDOM_CMD}0'")


def _pcapng_head(idb_len: int | None) -> bytes:
    shb = struct.pack("<IIIHHq", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1) + struct.pack("<I", 28)
    if idb_len is None:
        return b"\x0a\x0d\x0d\x0a" + struct.pack("<I", 0) + struct.pack("<I", 0x1A2B3C4D)
    return shb + struct.pack("<II", 1, idb_len)


@pytest.mark.parametrize("idb_len, says", [(None, "section header block of 0 bytes"),
                                           (4, "interface description block of 4 bytes")],
                         ids=["shb-length-0", "idb-length-4"])
def test_a_sparse_pcapng_with_broken_block_lengths_is_one_line(tmp_path, idb_len, says):
    """A section header of length 0, or an interface block of 4 bytes, then a gigabyte of holes:
    it was `ValueError: read length must be non-negative or -1`."""
    f = tmp_path / "holes.pcapng"
    with open(f, "wb") as out:
        out.write(_pcapng_head(idb_len))
        out.truncate(1 << 30)
    assert_refused(run_measured("import", str(f), "-o", str(tmp_path / "o.json")), says, "not a pcapng file")


def test_a_dense_pcap_of_one_byte_records_is_refused_after_a_run(tmp_path):
    """200,000 one-byte records (a real pcap header, Ethernet): none can hold an IP packet; the
    import stops after a run of them (12 million took 78 s to end in "no TPM commands found")."""
    f = tmp_path / "dense.pcap"
    rec = struct.pack("<IIII", 1, 0, 1, 1) + b"x"
    f.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + rec * 200_000)
    assert_refused(run_measured("import", str(f), "-o", str(tmp_path / "o.json")),
                   "too short to hold an IP packet")
