"""Hostile captures and pcaps given to export and import: refused as bad input (exit 2, one
line), never a crash, never a silently shorter output, never minutes of work."""

from __future__ import annotations

import json
import struct

from tests.helpers.paths import TESTS
from tests.helpers.processes import run_tpmtop

GETRANDOM_CMD = "80010000000c0000017b0008"
GETRANDOM_RSP = "80010000001400000000000a" + "00" * 8


def _capture_with_bytes(path, n: int = 32, *, command_hex=None, at: int = 0) -> None:
    """The sample capture with ``n`` GetRandom events that kept their bytes; event ``at`` gets
    ``command_hex`` instead of the real one. Written with json, not the capture writer (which
    refuses what these tests hand over, as a hand-edited file would have it)."""
    doc = json.loads((TESTS / "captures" / "sample-1.0.json").read_text())
    doc["t0_unix_ns"] = 1_700_000_000_000_000_000
    doc["events"] = [{"t_ns": 1000 * i, "command": "TPM2_CC_GetRandom", "handles": [], "sessions": [], "rc": 0,
                      "rc_text": "success", "wire_ns": 500, "origin": "user", "engine": None, "mode": None,
                      "op": None, "op_seq": None, "command_hex": GETRANDOM_CMD, "response_hex": GETRANDOM_RSP}
                     for i in range(n)]
    doc["ops"] = []
    if command_hex is not None:
        doc["events"][at]["command_hex"] = command_hex
    path.write_text(json.dumps(doc))


def test_export_of_a_good_capture_with_bytes_writes_every_command(tmp_path):
    """The baseline of the two below: the same capture, unaltered, exports all 32 commands."""
    cap = tmp_path / "ok.json"
    _capture_with_bytes(cap)
    r = run_tpmtop("export", str(cap), "--format", "pcapng", "-o", str(tmp_path / "ok.pcapng"))
    assert r.returncode == 0, r.stderr
    assert "32 commands with their responses, 64 frames" in r.stderr


def test_a_command_too_big_for_a_packet_is_bad_input_in_one_line(tmp_path):
    """A 3 MB command_hex: exit 2 and one line (it was exit 1, "internal error: PackError")."""
    cap = tmp_path / "big.json"
    _capture_with_bytes(cap, command_hex="80" * 3_000_000, at=5)
    r = run_tpmtop("export", str(cap), "--format", "pcapng", "-o", str(tmp_path / "big.pcapng"))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "events[5]" in lines[0] and "internal error" not in lines[0]
    assert not (tmp_path / "big.pcapng").exists()


def test_a_command_just_over_a_packet_is_refused_by_the_exporter(tmp_path):
    """Within the schema's 64 KiB but more than an IPv4 packet holds: the exporter says so."""
    cap = tmp_path / "edge.json"
    _capture_with_bytes(cap, command_hex="80" * 65500, at=3)
    r = run_tpmtop("export", str(cap), "--format", "pcapng", "-o", str(tmp_path / "edge.pcapng"))
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "events[3]" in r.stderr and "65,500 bytes" in r.stderr


def test_invalid_hex_is_refused_by_validation(tmp_path):
    """command_hex "zz…": the capture is invalid (exit 2, naming the event), for export and for
    compare alike — not 31 of 32 commands written and compare content."""
    cap = tmp_path / "zz.json"
    _capture_with_bytes(cap, command_hex="zz" * 12, at=7)
    r = run_tpmtop("export", str(cap), "--format", "pcapng", "-o", str(tmp_path / "zz.pcapng"))
    assert r.returncode == 2, r.stderr
    assert "events[7]" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "zz.pcapng").exists()
    r = run_tpmtop("compare", str(cap), str(cap))
    assert r.returncode == 2, r.stderr
    assert "events[7]" in r.stderr


def _sparse(path, head: bytes, size: int) -> None:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)


def test_a_huge_sparse_file_with_a_pcap_magic_is_refused_at_once(tmp_path):
    """1 GB of holes after the pcap magic took minutes to refuse (67 million empty records);
    the header alone says it is no capture."""
    f = tmp_path / "holes.pcap"
    _sparse(f, b"\xd4\xc3\xb2\xa1", 1 << 30)
    r = run_tpmtop("import", str(f), "-o", str(tmp_path / "o.json"), timeout=60)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "holes.pcap" in r.stderr


def test_a_valid_pcap_header_then_a_gigabyte_of_zeros_is_refused_at_once(tmp_path):
    """A real pcap header (2.4, Ethernet) and then zeros: a run of empty records is no traffic."""
    f = tmp_path / "zeros.pcap"
    _sparse(f, struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1), 1 << 30)
    r = run_tpmtop("import", str(f), "-o", str(tmp_path / "o.json"), timeout=60)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "zeros.pcap" in r.stderr


def test_half_a_byte_of_hex_is_refused_by_validation(tmp_path):
    """An odd number of hex digits (the typed reader checks the characters, then the length)."""
    cap = tmp_path / "odd.json"
    _capture_with_bytes(cap, command_hex=GETRANDOM_CMD + "0", at=9)
    r = run_tpmtop("compare", str(cap), str(cap))
    assert r.returncode == 2, r.stderr
    assert "events[9]" in r.stderr and len(r.stderr.strip().splitlines()) == 1
