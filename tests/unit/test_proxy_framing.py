"""The proxy's incremental readers: a request cut anywhere is judged the same as when it comes
whole, and a frame that cannot be a request is refused as soon as the bytes that show it are in."""

from __future__ import annotations

import struct

import pytest

from tpmtop.proxy import protocol as P

GET_RANDOM_8 = bytes.fromhex("80010000000c0000017b0008")
MSSIM_CMD = struct.pack(">IBI", P.MS_SIM_TPM_SEND_COMMAND, 3, len(GET_RANDOM_8)) + GET_RANDOM_8


def _feed(reader, data: bytes, *extra):
    """Byte by byte: every prefix is incomplete (a need beyond what is there), the whole is a
    request."""
    buf = bytearray()
    for i, byte in enumerate(data):
        buf.append(byte)
        got = reader(buf, *extra)
        if i + 1 < len(data):
            assert isinstance(got, int) and got > len(buf), (i, got)
    return got


def test_a_raw_command_cut_anywhere():
    assert _feed(P.raw_command, GET_RANDOM_8) == (12, P.MS_SIM_TPM_SEND_COMMAND, 0, GET_RANDOM_8)
    two = bytearray(GET_RANDOM_8 + GET_RANDOM_8[:5])
    assert P.raw_command(two)[0] == 12  # the first of two; the rest stays in the buffer


def test_an_mssim_command_cut_anywhere_keeps_its_locality():
    assert _feed(P.mssim_request, MSSIM_CMD) == (len(MSSIM_CMD), P.MS_SIM_TPM_SEND_COMMAND, 3, GET_RANDOM_8)
    assert P.mssim_request(bytearray(struct.pack(">I", P.MS_SIM_SESSION_END))) == (4, P.MS_SIM_SESSION_END, 0, None)
    hs = struct.pack(">II", P.MS_SIM_REMOTE_HANDSHAKE, 1)
    assert _feed(P.mssim_request, hs) == (8, P.MS_SIM_REMOTE_HANDSHAKE, 0, None)


@pytest.mark.parametrize("reader,frame,says,at", [
    (P.raw_command, bytes.fromhex("8001ffffffff"), "size field 4294967295", 6),
    (P.raw_command, bytes.fromhex("800100000003"), "size field 3", 6),
    (P.mssim_request, struct.pack(">I", 0x41414141), "unknown request", 4),
    (P.mssim_request, struct.pack(">IBI", 8, 0, 5000), "size field 5000", 9),
    (P.mssim_request, struct.pack(">IBI", 8, 0, 12) + bytes.fromhex("80010000000d0000017b0008"),
     "carries a TPM header of 13", 21),
])
def test_a_garbled_frame_is_refused_once_its_bytes_show_it(reader, frame, says, at):
    buf = bytearray()
    for byte in frame[:at - 1]:
        buf.append(byte)
        assert isinstance(reader(buf), int)
    buf += frame[at - 1:at]
    with pytest.raises(P.FrameError, match=says):
        reader(buf)


def test_control_requests_and_a_refused_one():
    state: dict = {}
    loc = struct.pack(">IB", P.CMD_SET_LOCALITY, 2)
    assert _feed(P.control_request, loc, state) == (5, P.CMD_SET_LOCALITY, struct.pack(">I", 0))
    assert state["locality"] == 2
    bad_loc = struct.pack(">IB", P.CMD_SET_LOCALITY, 9)
    assert P.control_request(bytearray(bad_loc), state)[2] == struct.pack(">I", P.TPM_BAD_LOCALITY)
    hashed = struct.pack(">II", P.CMD_HASH_DATA, 3) + b"abc"
    assert _feed(P.control_request, hashed, state)[0] == len(hashed)
    with pytest.raises(P.FrameError, match="HASH_DATA of 5000"):
        P.control_request(bytearray(struct.pack(">II", P.CMD_HASH_DATA, 5000)), state)
    # a state blob (not offered): answered, and nothing after its code is taken for a request
    blob = bytearray(struct.pack(">I", 0x0C) + b"\0" * 40)
    assert P.control_request(blob, state) == (4, 0x0C, struct.pack(">I", P.TPM_BAD_ORDINAL))
    assert state["refused"] == 0x0C


def test_platform_requests():
    assert _feed(P.platform_request, struct.pack(">I", P.MS_SIM_POWER_ON)) == (4, P.MS_SIM_POWER_ON, b"\0" * 4)
    hashed = struct.pack(">II", P.MS_SIM_HASH_DATA, 2) + b"xy"
    assert _feed(P.platform_request, hashed) == (10, P.MS_SIM_HASH_DATA, b"\0" * 4)
    assert P.platform_request(bytearray(struct.pack(">I", P.MS_SIM_SESSION_END))) == (4, P.MS_SIM_SESSION_END, b"")
