"""The import's struct reading of plain IPv4/TCP frames and of pcapng packet blocks, against
dpkt's reading of the same bytes (dpkt builds the frames and files, and is the judge)."""

from __future__ import annotations

import struct

import dpkt
import pytest

from tpmtop.importers import pcap

CMD = bytes.fromhex("80010000000c0000017b0008")  # GetRandom(8)


def _ipv4(payload: bytes = CMD, **ip_fields) -> dpkt.ip.IP:
    tcp = dpkt.tcp.TCP(sport=40000, dport=2321, seq=123456789, flags=dpkt.tcp.TH_ACK | dpkt.tcp.TH_PUSH,
                       data=payload)
    ip = dpkt.ip.IP(src=bytes([127, 0, 0, 1]), dst=bytes([127, 0, 0, 2]), p=dpkt.ip.IP_PROTO_TCP, data=tcp,
                    **ip_fields)
    ip.len = len(bytes(ip))
    return ip


def _frame(linktype: int, ip: dpkt.ip.IP) -> bytes:
    raw = bytes(ip)
    if linktype == 1:
        return bytes(dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, type=0x0800, data=raw))
    if linktype == 0:
        return b"\x02\x00\x00\x00" + raw
    if linktype == 113:
        return bytes(dpkt.sll.SLL(type=0, hrd=772, hlen=6, hdr=b"\x00" * 8, ethtype=0x0800, data=raw))
    return raw


def _by_dpkt(linktype: int, frame: bytes) -> tuple:
    ip = pcap._ip_from_frame(linktype, frame)
    tcp = ip.data
    return bytes(ip.src), tcp.sport, bytes(ip.dst), tcp.dport, tcp.seq, bytes(tcp.data)


@pytest.mark.parametrize("linktype", [1, 0, 113, 228, 101])
def test_a_plain_ipv4_tcp_frame_reads_as_dpkt_reads_it(linktype):
    frame = _frame(linktype, _ipv4())
    assert pcap._ipv4_tcp(linktype, frame) == _by_dpkt(linktype, frame)


def test_ethernet_padding_is_not_payload():
    frame = _frame(1, _ipv4(b"")) + b"\x00" * 6  # a short frame padded to Ethernet's minimum
    got = pcap._ipv4_tcp(1, frame)
    assert got is not None and got[5] == b"" == _by_dpkt(1, frame)[5]


@pytest.mark.parametrize("what, frame", [
    ("a fragment", _frame(228, _ipv4(mf=1))),
    ("a later fragment", _frame(228, _ipv4(offset=1))),
    ("UDP", bytes(dpkt.ip.IP(src=b"\x7f\0\0\1", dst=b"\x7f\0\0\1", p=17, data=b"x" * 12))),
    ("a frame cut short", _frame(228, _ipv4())[:30]),
    ("IPv6 in Ethernet", bytes(dpkt.ethernet.Ethernet(type=0x86DD, data=b"\x60" + b"\0" * 39))),
])
def test_anything_else_is_left_to_dpkt(what, frame):
    linktype = 1 if what == "IPv6 in Ethernet" else 228
    assert pcap._ipv4_tcp(linktype, frame) is None, what


def test_pcapng_packets_and_timestamps_are_dpkts(tmp_path):
    """Nanosecond resolution, an offset, and a block that is not a packet between packets."""
    path = tmp_path / "t.pcapng"
    frames = [_frame(228, _ipv4(CMD + bytes(i))) for i in range(5)]
    with open(path, "wb") as f:
        idb = dpkt.pcapng.InterfaceDescriptionBlockLE(linktype=228, snaplen=65535, opts=[
            dpkt.pcapng.PcapngOptionLE(code=dpkt.pcapng.PCAPNG_OPT_IF_TSRESOL, data=b"\x09"),
            dpkt.pcapng.PcapngOptionLE(code=dpkt.pcapng.PCAPNG_OPT_IF_TSOFFSET, data=(7).to_bytes(8, "little")),
            dpkt.pcapng.PcapngOptionLE(code=dpkt.pcapng.PCAPNG_OPT_ENDOFOPT)])
        w = dpkt.pcapng.Writer(f, snaplen=65535, linktype=228, idb=idb)
        for i, fr in enumerate(frames):
            w.writepkt(fr, ts=1_700_000_000.123456 + i * 0.000001)
            if i == 2:
                # a name resolution block (type 4) holding only its end: not a packet
                f.write(struct.pack("<II", 4, 16) + bytes(4) + struct.pack("<I", 16))
    with open(path, "rb") as f:
        want = list(dpkt.pcapng.Reader(f))
    with open(path, "rb") as f:
        got = list(pcap._pcapng_packets(f, dpkt.pcapng.Reader(f)))
    assert len(want) == 5 and got == want
