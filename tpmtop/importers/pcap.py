"""TPM traffic from pcap/pcapng files: tpm2-tss's ``pcap:`` TCTI and tcpdump of a simulator port.

tpm2-tss's pcap TCTI (``TCTI_PCAP_FILE``) writes pcapng, link type raw IPv4, one TCP segment
per command or response on port 2321, the TPM bytes as they are. A tcpdump of a swtpm or
Microsoft simulator port (``tcpdump -i lo -w f.pcap port 2321``) has Ethernet, loopback or
Linux "cooked" frames, segments that split or merge messages, retransmissions, and either the
raw TPM bytes (swtpm's TCTI) or the simulator framing (mssim's TCTI: ``TPM_SEND_COMMAND``,
locality, size, command; the answer size, response, a zero acknowledgement).

Parsing uses dpkt (pure Python, reads pcap and pcapng, every link type above): the TCP
streams are reassembled by sequence number per direction, cut into TPM messages by the size
in their headers, and commands are paired with responses in order per connection. Latency is
the first byte of the command's first frame to the response's last frame, from the frame
timestamps. Layer: importers; no Textual.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tpmtop.errors import UsageError
from tpmtop.importers.observed import ObservedExchange

TPM_PORT = 2321
PLATFORM_PORT = 2322  # the simulators' power/NV control port: no TPM commands there

PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"}
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"

MSSIM_SEND_COMMAND = 8
MSSIM_REMOTE_HANDSHAKE = 15
MSSIM_SESSION_END = 20
MSSIM_STOP = 21


class PcapError(UsageError):
    """A file that is not a pcap/pcapng of TPM traffic (exit status 2)."""


def is_pcap(path: str | os.PathLike[str]) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head in PCAP_MAGICS or head == PCAPNG_MAGIC


@dataclass
class _Seg:
    ts_ns: int
    seq: int
    data: bytes


@dataclass
class _Direction:
    segs: list[_Seg] = field(default_factory=list)

    def stream(self) -> tuple[bytes, list[tuple[int, int]]]:
        """The reassembled bytes and ``[(offset, ts_ns)]``: where each frame's new bytes start.

        Retransmitted bytes (sequence numbers already seen) are dropped; a hole is closed up
        (the bytes are lost either way and the message framing resynchronises on the sizes).
        """
        out = bytearray()
        marks: list[tuple[int, int]] = []
        nxt: int | None = None
        for s in self.segs:
            data = s.data
            if nxt is not None:
                delta = (s.seq - nxt) & 0xFFFFFFFF
                if delta >= 0x80000000:  # starts before nxt: (partly) a retransmission
                    overlap = (nxt - s.seq) & 0xFFFFFFFF
                    if overlap >= len(data):
                        continue
                    data = data[overlap:]
            marks.append((len(out), s.ts_ns))
            out += data
            nxt = (s.seq + len(s.data)) & 0xFFFFFFFF
        return bytes(out), marks


def _ts_at(marks: list[tuple[int, int]], offset: int) -> int:
    """The timestamp of the frame that carried byte ``offset`` of a direction's stream."""
    import bisect

    i = bisect.bisect_right(marks, (offset, float("inf"))) - 1
    return marks[max(i, 0)][1]


def _ip_from_frame(linktype: int, buf: bytes) -> Any:
    import dpkt

    if linktype == 1:  # Ethernet
        eth = dpkt.ethernet.Ethernet(buf)
        return eth.data
    if linktype in (12, 14, 101, 228, 229):  # raw IP (DLT_RAW variants, LINKTYPE_IPV4/6)
        return dpkt.ip.IP(buf) if buf and buf[0] >> 4 == 4 else dpkt.ip6.IP6(buf)
    if linktype in (0, 108):  # BSD loopback: 4-byte address family, host or network order
        return dpkt.ip.IP(buf[4:]) if buf[4] >> 4 == 4 else dpkt.ip6.IP6(buf[4:])
    if linktype == 113:  # Linux cooked (tcpdump -i any)
        return dpkt.sll.SLL(buf).data
    if linktype == 276:  # Linux cooked v2
        return dpkt.sll2.SLL2(buf).data
    raise PcapError(f"link type {linktype} is not one tpmtop reads (Ethernet, raw IP, loopback, Linux cooked)")


MAX_EMPTY_RUN = 10_000  # records without a byte, in a row, before a file is no capture


def _check_pcap_header(path: str, head: bytes) -> None:
    """A pcap's 24-byte header: version 2.x (every libpcap since 1998 writes 2.4)."""
    if len(head) < 24:
        raise PcapError(f"{path}: cut short inside the pcap header")
    order = "<" if head[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    major, minor = struct.unpack(order + "HH", head[4:8])
    if major != 2:
        raise PcapError(f"{path}: pcap version {major}.{minor} (only 2.x exists): not a pcap file")


def _read_frames(path: str) -> Iterator[tuple[int, bytes, int, bytes, int, int, bytes]]:
    """``(ts_ns, src, sport, dst, dport, seq, payload)`` for every TCP segment with data."""
    import dpkt

    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(0)
        if head == PCAPNG_MAGIC:
            reader = dpkt.pcapng.Reader(f)
        elif head in PCAP_MAGICS:
            _check_pcap_header(path, f.read(24))
            f.seek(0)
            reader = dpkt.pcap.Reader(f)
        else:
            raise PcapError(f"{path}: not a pcap or pcapng file")
        linktype = reader.datalink()
        empty = 0
        for ts, buf in reader:
            if not buf:
                # A hole of a sparse file, or zeros, reads as empty records (16 bytes each): a
                # gigabyte of them was minutes of work before anything was said.
                empty += 1
                if empty > MAX_EMPTY_RUN:
                    raise PcapError(f"{path}: more than {MAX_EMPTY_RUN:,} empty records in a row (zeros or a "
                                    "sparse file's holes): not a capture of traffic")
                continue
            empty = 0
            try:
                ip = _ip_from_frame(linktype, buf)
            except PcapError:
                raise
            except Exception:  # a frame dpkt cannot parse is not TPM traffic
                continue
            tcp = getattr(ip, "data", None)
            if not isinstance(tcp, dpkt.tcp.TCP) or not tcp.data:
                continue
            # dpkt gives float seconds; round to whole µs so ns-precision files still line up
            ts_ns = round(float(ts) * 1e6) * 1000
            yield ts_ns, bytes(ip.src), tcp.sport, bytes(ip.dst), tcp.dport, tcp.seq, bytes(tcp.data)


def _addr(raw: bytes, port: int) -> str:
    import ipaddress

    try:
        return f"{ipaddress.ip_address(raw)}:{port}"
    except ValueError:
        return f"{raw.hex()}:{port}"


def _looks_like_command(data: bytes) -> bool:
    from tpmtop.tpm.names import CC_NAMES

    if len(data) >= 10 and data[:2] in (b"\x80\x01", b"\x80\x02"):
        return int.from_bytes(data[6:10], "big") in CC_NAMES
    return len(data) >= 4 and int.from_bytes(data[:4], "big") in (MSSIM_SEND_COMMAND, MSSIM_REMOTE_HANDSHAKE)


def _split_raw(data: bytes) -> tuple[list[tuple[int, int]], str | None]:
    """``[(start, end)]`` of the TPM messages in a raw stream, and why it stopped early."""
    out: list[tuple[int, int]] = []
    off = 0
    while off + 10 <= len(data):
        tag, size = struct.unpack_from(">HI", data, off)
        if tag not in (0x8001, 0x8002, 0x00C4) or size < 10:
            return out, f"byte {off} is not a TPM message header"
        if off + size > len(data):
            return out, f"the message at byte {off} is cut short"
        out.append((off, off + size))
        off += size
    return out, (None if off == len(data) else f"{len(data) - off} bytes left over")


def _mssim_commands(data: bytes) -> tuple[list[tuple[int, int]], str | None, int]:
    """Commands in a client stream with the simulator framing; also the number of handshakes."""
    out: list[tuple[int, int]] = []
    off = 0
    handshakes = 0
    while off + 4 <= len(data):
        code = int.from_bytes(data[off:off + 4], "big")
        if code == MSSIM_SEND_COMMAND:
            if off + 9 > len(data):
                return out, "a TPM_SEND_COMMAND is cut short", handshakes
            size = int.from_bytes(data[off + 5:off + 9], "big")
            start = off + 9
            if start + size > len(data):
                return out, f"the command at byte {start} is cut short", handshakes
            out.append((start, start + size))
            off = start + size
        elif code == MSSIM_REMOTE_HANDSHAKE:
            handshakes += 1
            off += 8
        elif code in (MSSIM_SESSION_END, MSSIM_STOP):
            off += 4
        else:
            return out, f"simulator command {code} at byte {off} is not one tpmtop reads", handshakes
    return out, None, handshakes


def _mssim_responses(data: bytes, handshakes: int) -> tuple[list[tuple[int, int]], str | None]:
    out: list[tuple[int, int]] = []
    off = 12 * handshakes  # each handshake answer: server version, flags, acknowledgement
    while off + 4 <= len(data):
        size = int.from_bytes(data[off:off + 4], "big")
        start = off + 4
        if start + size + 4 > len(data):
            return out, f"the response at byte {start} is cut short"
        out.append((start, start + size))
        off = start + size + 4  # the zero acknowledgement
    return out, None


@dataclass
class ImportResult:
    exchanges: list[ObservedExchange]
    framing: str  # "raw" | "mssim" | "mixed"
    connections: int
    warnings: list[str]


def read_pcap(path: str | os.PathLike[str], port: int | None = None) -> ImportResult:
    """Every TPM command/response pair in a pcap or pcapng file."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise PcapError(f"{path}: no such file")
    if not is_pcap(path):
        raise PcapError(f"{path}: not a pcap or pcapng file")
    conns: dict[tuple[Any, ...], dict[tuple[Any, ...], _Direction]] = {}
    try:
        for ts, src, sport, dst, dport, seq, data in _read_frames(path):
            if PLATFORM_PORT in (sport, dport) and port != PLATFORM_PORT:
                continue
            a, b = (src, sport), (dst, dport)
            key = (a, b) if a <= b else (b, a)
            conns.setdefault(key, {}).setdefault((a, b), _Direction()).segs.append(_Seg(ts, seq, data))
    except PcapError:
        raise
    except Exception as e:  # dpkt on a damaged file: bad input, one line
        raise PcapError(f"{path}: unreadable capture file ({type(e).__name__}: {e})") from None

    exchanges: list[ObservedExchange] = []
    warnings: list[str] = []
    framings: set[str] = set()
    used = 0
    multi = len(conns) > 1
    for dirs in conns.values():
        client_dir = server_dir = None
        for d in dirs:
            other = next((x for x in dirs if x != d), None)
            _, sport = d[0]
            _, dport = d[1]
            is_client = (dport == port) if port else (
                dport == TPM_PORT or (sport != TPM_PORT and _looks_like_command(dirs[d].segs[0].data)
                                      and (other is None or not _looks_like_command(dirs[other].segs[0].data))))
            if is_client:
                client_dir, server_dir = d, other
        if client_dir is None:
            continue
        cdata, cmarks = dirs[client_dir].stream()
        sdata, smarks = dirs[server_dir].stream() if server_dir else (b"", [])
        if cdata[:2] in (b"\x80\x01", b"\x80\x02"):
            framing = "raw"
            cmds, why = _split_raw(cdata)
            rsps, why_r = _split_raw(sdata)
        else:
            framing = "mssim"
            cmds, why, hs = _mssim_commands(cdata)
            rsps, why_r = _mssim_responses(sdata, hs)
        if not cmds:
            continue
        used += 1
        framings.add(framing)
        who = _addr(*client_dir[0])
        for w in (why, why_r):
            if w:
                warnings.append(f"{who}: {w}")
        for i, (cs, ce) in enumerate(cmds):
            t_start = _ts_at(cmarks, cs)
            if i < len(rsps):
                rs, re_ = rsps[i]
                t_end = _ts_at(smarks, re_ - 1)
                exchanges.append(ObservedExchange(t_start, max(t_end - t_start, 0), cdata[cs:ce], sdata[rs:re_],
                                          who if multi else None))
            else:
                exchanges.append(ObservedExchange(t_start, 0, cdata[cs:ce], None, who if multi else None))
        if len(cmds) > len(rsps):
            warnings.append(f"{who}: {len(cmds) - len(rsps)} command(s) without a response")
    if not exchanges:
        raise PcapError(f"{path}: no TPM commands found (looked for TCP port {port or TPM_PORT}, or a "
                        f"stream that starts with a TPM command; give --port for another port)")
    return ImportResult(exchanges, framings.pop() if len(framings) == 1 else "mixed", used, warnings)


def import_pcap(path: str | os.PathLike[str], port: int | None = None) -> tuple[dict[str, Any], ImportResult]:
    """A pcap file as a ``tpmtop.capture/1`` document (with every command's bytes)."""
    from tpmtop.importers.observed import capture_from_exchanges

    res = read_pcap(path, port)
    cap = capture_from_exchanges(res.exchanges, origin="imported", source=f"pcap:{os.path.basename(path)}",
                                 extra={"imported": {"file": os.path.basename(os.fspath(path)),
                                                     "framing": res.framing, "connections": res.connections}})
    # Not this machine's: the traffic was recorded wherever the file was made (its TPM and
    # kernel are that machine's), so the capture claims no host rather than the importer's.
    cap["host"] = {"hostname": "unknown", "kernel": "unknown",
                   "note": "imported from a pcap file: the machine that recorded it is not known"}
    return cap, res
