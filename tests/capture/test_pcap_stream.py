"""The pcap import reads as the file streams: TCP reassembled per direction, retransmissions
dropped, commands paired with their responses per connection, and events in start-time order
across connections even when one connection's answer comes long after another's."""

from __future__ import annotations

import json
import socket

import dpkt

from tests.helpers.processes import run_tpmtop

GETRANDOM_8 = bytes.fromhex("80010000000c0000017b0008")
GETRANDOM_16 = bytes.fromhex("80010000000c0000017b0010")


def _answer(n: int) -> bytes:
    body = n.to_bytes(2, "big") + bytes(range(n))
    return (0x8001).to_bytes(2, "big") + (10 + len(body)).to_bytes(4, "big") + bytes(4) + body


def _frame(src_port: int, dst_port: int, seq: int, payload: bytes) -> bytes:
    tcp = dpkt.tcp.TCP(sport=src_port, dport=dst_port, seq=seq, flags=dpkt.tcp.TH_PUSH | dpkt.tcp.TH_ACK,
                       data=payload)
    ip = dpkt.ip.IP(src=socket.inet_aton("127.0.0.1"), dst=socket.inet_aton("127.0.0.1"), p=dpkt.ip.IP_PROTO_TCP,
                    data=tcp)
    ip.len = 20 + len(bytes(tcp))
    return bytes(dpkt.ethernet.Ethernet(src=b"\0" * 6, dst=b"\0" * 6, type=dpkt.ethernet.ETH_TYPE_IP, data=ip))


def test_interleaved_connections_come_out_paired_and_in_start_order(tmp_path):
    pcap = tmp_path / "two.pcap"
    a, b = 40001, 40002
    frames = [  # (seconds, frame): A's command split in two; B's sent twice (a retransmission)
        (1.000, _frame(a, 2321, 100, GETRANDOM_8[:4])),
        (1.002, _frame(a, 2321, 104, GETRANDOM_8[4:])),
        (1.010, _frame(b, 2321, 500, GETRANDOM_16)),
        (1.015, _frame(b, 2321, 500, GETRANDOM_16)),
        (1.020, _frame(2321, b, 900, _answer(16))),
        (1.050, _frame(2321, a, 700, _answer(8))),
    ]
    with open(pcap, "wb") as f:
        w = dpkt.pcap.Writer(f, linktype=dpkt.pcap.DLT_EN10MB)
        for ts, buf in frames:
            w.writepkt(buf, ts=ts)
    out = tmp_path / "two.json"
    r = run_tpmtop("import", str(pcap), "-o", str(out), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "2 TPM commands (2 with a response), 2 connection(s), raw framing" in r.stderr
    events = json.loads(out.read_text())["events"]
    assert [e["command_hex"] for e in events] == [GETRANDOM_8.hex(), GETRANDOM_16.hex()]
    assert [e["response_hex"] for e in events] == [_answer(8).hex(), _answer(16).hex()]
    assert [e["t_ns"] for e in events] == [0, 10_000_000]
    # A: first byte at 1.000, the answer's last at 1.050; B: 1.010 to 1.020
    assert [e["wire_ns"] for e in events] == [50_000_000, 10_000_000]
    assert [e["client"] for e in events] == [f"127.0.0.1:{a}", f"127.0.0.1:{b}"]
