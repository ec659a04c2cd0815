"""A capture as pcapng that Wireshark's TPM 2.0 dissector decodes.

The framing is the one tpm2-tss's ``pcap:`` TCTI writes: link type raw IPv4 (228), one TCP
segment per command (client → port 2321) and per response (2321 → client), the TPM bytes
as the payload with no simulator framing. Wireshark's ``tpm`` dissector is registered on TCP
port 2321 and tells commands from responses by direction. Frame timestamps are the
capture's own: the command at its start, the response at start + wire latency.

One TCP stream per client: events that carry a ``client`` (proxied traffic, imported files
with several connections) get one client address/port each; otherwise one stream.

Streamed: the capture is read event by event (the typed reader compare uses), each frame is
built and written as the events pass. The IPv4 and TCP headers are packed here (two
``struct`` calls and a checksum), not built as dpkt packet objects: at a million events those
objects were 56 % of the export's time. A response's frame waits in a small heap until an
event that starts after it has been seen, so frames come out in time order when the events
are in time order (as every capture writer puts them) and memory holds only the responses
still in flight. dpkt writes the two header blocks (section, interface).

Only events that kept their bytes (``command_hex``) can be exported; the rest are counted
and reported. Layer: exporters; no Textual.
"""

from __future__ import annotations

import datetime as _dt
import heapq
import os
import struct
from contextlib import ExitStack
from typing import IO, Any

from tpmtop.errors import UsageError

LINKTYPE_IPV4 = 228
TPM_PORT = 2321
SERVER_IP = bytes([127, 0, 0, 1])
FIRST_CLIENT_PORT = 50000  # tpm2-tss's pcap TCTI uses 50000 for its one client
MAX_PAYLOAD = 65535 - 20 - 20  # an IPv4 packet's total length is 16 bits
WRITE_CHUNK = 1 << 20  # bytes of blocks gathered before one write

_IP = struct.Struct(">BBHHHBBH4s4s")
_TCP = struct.Struct(">HHIIBBHHH")
_PSEUDO = struct.Struct(">4s4sBBH")
_EPB_HEAD = struct.Struct("<IIIIIII")  # type, total length, interface, ts high, ts low, caplen, len
_U32LE = struct.Struct("<I")
_TH_ACK_PSH = 0x10 | 0x08
_ZERO_PAD = (b"", b"\0\0\0", b"\0\0", b"\0")


def _checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of ``data``: 2^16 ≡ 1 (mod 0xFFFF), so the big-endian
    number ``data`` is, modulo 0xFFFF, the ones'-complement sum of its 16-bit words — one C
    operation instead of a loop over the words."""
    if len(data) & 1:
        data += b"\0"
    s = int.from_bytes(data, "big") % 0xFFFF
    return ~s & 0xFFFF


def _t0_from_created(head: dict[str, Any], last_end_ns: int) -> int:
    """Older captures have no ``t0_unix_ns``: ``created`` is when the capture was written,
    after the last event."""
    try:
        created = _dt.datetime.fromisoformat(str(head.get("created")))
        end = int(created.timestamp() * 1e9)
    except ValueError:
        end = 0
    return max(end - last_end_ns, 0)


class _Stream:
    def __init__(self, index: int):
        self.client_ip = bytes([127, 0, 0, 2 + index // 15000])
        self.client_port = FIRST_CLIENT_PORT + index % 15000
        self.cseq = 1_000 + 7919 * index
        self.sseq = 5_000_000 + 104729 * index

    def segment(self, payload: bytes, to_server: bool) -> bytes:
        """One IPv4 packet holding a TCP segment with ``payload`` (PSH|ACK), both checksums set."""
        if to_server:
            seq, ack = self.cseq, self.sseq
            self.cseq = (self.cseq + len(payload)) & 0xFFFFFFFF
            src, dst, sport, dport = self.client_ip, SERVER_IP, self.client_port, TPM_PORT
        else:
            seq, ack = self.sseq, self.cseq
            self.sseq = (self.sseq + len(payload)) & 0xFFFFFFFF
            src, dst, sport, dport = SERVER_IP, self.client_ip, TPM_PORT, self.client_port
        tcp_len = 20 + len(payload)
        hdr = _TCP.pack(sport, dport, seq, ack, 5 << 4, _TH_ACK_PSH, 65535, 0, 0)
        csum = _checksum(_PSEUDO.pack(src, dst, 0, 6, tcp_len) + hdr + payload)
        tcp = hdr[:16] + csum.to_bytes(2, "big") + hdr[18:]
        ip = _IP.pack(0x45, 0, 20 + tcp_len, 0, 0, 64, 6, 0, src, dst)
        ip = ip[:10] + _checksum(ip).to_bytes(2, "big") + ip[12:]
        return ip + tcp + payload


def _epb(ts_ns: int, pkt: bytes) -> bytes:
    """An Enhanced Packet Block, little-endian, interface 0, timestamp in ns (if_tsresol 9)."""
    n = len(pkt)
    pad = _ZERO_PAD[n & 3]
    total = 32 + n + len(pad)
    return b"".join((_EPB_HEAD.pack(6, total, 0, ts_ns >> 32, ts_ns & 0xFFFFFFFF, n, n), pkt, pad,
                     _U32LE.pack(total)))


class _Writer:
    """Frames in time order, written in chunks; the output is opened at the first frame, so a
    capture with nothing to export writes nothing (not even to stdout)."""

    def __init__(self, out: Any, stack: ExitStack):
        self.out, self.stack = out, stack
        self.f: IO[bytes] | None = None
        self.heap: list[tuple[int, int, bytes]] = []  # (ts_ns, order, ip packet)
        self.chunk: list[bytes] = []
        self.size = 0
        self.frames = 0

    def _open(self) -> IO[bytes]:
        import dpkt

        from tpmtop.atomic import open_atomic

        opened = self.out.open() if hasattr(self.out, "open") else open_atomic(self.out, text=False)
        f: IO[bytes] = self.stack.enter_context(opened)
        shb = dpkt.pcapng.SectionHeaderBlockLE(opts=[
            dpkt.pcapng.PcapngOptionLE(code=dpkt.pcapng.PCAPNG_OPT_SHB_USERAPPL, text="tpmtop"),
            dpkt.pcapng.PcapngOptionLE(code=dpkt.pcapng.PCAPNG_OPT_ENDOFOPT)])
        idb = dpkt.pcapng.InterfaceDescriptionBlockLE(linktype=LINKTYPE_IPV4, snaplen=65535, opts=[
            dpkt.pcapng.PcapngOptionLE(code=dpkt.pcapng.PCAPNG_OPT_IF_TSRESOL, data=b"\x09"),
            dpkt.pcapng.PcapngOptionLE(code=dpkt.pcapng.PCAPNG_OPT_ENDOFOPT)])
        dpkt.pcapng.Writer(f, snaplen=65535, linktype=LINKTYPE_IPV4, shb=shb, idb=idb)  # writes both blocks
        return f

    def add(self, ts_ns: int, order: int, pkt: bytes) -> None:
        heapq.heappush(self.heap, (ts_ns, order, pkt))

    def flush_before(self, ts_ns: int, order: int) -> None:
        """Write every frame that comes before (ts_ns, order)."""
        heap = self.heap
        while heap and (heap[0][0], heap[0][1]) <= (ts_ns, order):
            t, _, pkt = heapq.heappop(heap)
            self._put(_epb(t, pkt))

    def _put(self, block: bytes) -> None:
        self.chunk.append(block)
        self.size += len(block)
        self.frames += 1
        if self.size >= WRITE_CHUNK:
            self._write()

    def _write(self) -> None:
        if self.f is None:
            self.f = self._open()
        self.f.write(b"".join(self.chunk))
        self.chunk.clear()
        self.size = 0

    def close(self) -> None:
        while self.heap:
            t, _, pkt = heapq.heappop(self.heap)
            self._put(_epb(t, pkt))
        if self.chunk:
            self._write()


def export_pcapng(capture_path: str | os.PathLike[str], out: Any) -> dict[str, Any]:
    """Write the pcapng to ``out`` (a path, or a checked :class:`tpmtop.output.Output`: a file,
    a device or FIFO written through, or stdout); returns counts. A capture without bytes is a
    UsageError (exit 2), and so is a command too big for one IPv4 packet."""
    from tpmtop.capture.read import CaptureReader

    streams: dict[object, _Stream] = {}
    counts = {"events": 0, "usable": 0, "kernel": 0, "last_end": 0}
    t0: list[int | None] = [None]  # the wall clock of t_ns = 0, from the head (read before the events)
    late: list[tuple[int, int, int, Any, bytes, bytes | None]] = []  # old captures: events until t0 is known

    with ExitStack() as stack:
        w = _Writer(out, stack)
        reader: CaptureReader

        def frames(i: int, t_ns: int, wire_ns: int, key: object, cmd: bytes, rsp: bytes | None) -> None:
            st = streams.get(key)
            if st is None:
                st = streams[key] = _Stream(len(streams))
            start = t0[0] + t_ns  # type: ignore[operator]  # set before the first call
            w.flush_before(start, 2 * i)
            w.add(start, 2 * i, st.segment(cmd, True))
            if rsp is not None:
                w.add(start + wire_ns, 2 * i + 1, st.segment(rsp, False))

        def on_event(e: Any) -> None:
            i = counts["events"]
            counts["events"] = i + 1
            if e.t_ns + e.wire_ns > counts["last_end"]:
                counts["last_end"] = e.t_ns + e.wire_ns
            extra = e.extra
            hx = extra.get("command_hex") if extra else None
            if not isinstance(hx, str):
                if e.origin == "kernel":
                    counts["kernel"] += 1
                return
            cmd = bytes.fromhex(hx)  # the reader validated the hex
            rh = extra.get("response_hex")
            rsp = bytes.fromhex(rh) if isinstance(rh, str) else None
            for what, b in (("command", cmd), ("response", rsp)):
                if b is not None and len(b) > MAX_PAYLOAD:
                    raise UsageError(f"{os.fspath(capture_path)}: events[{i}]: its {what} is {len(b):,} bytes, "
                                     f"more than one IPv4 packet holds ({MAX_PAYLOAD:,}); not a TPM's")
            counts["usable"] += 1
            if t0[0] is None:
                got = reader.head.get("t0_unix_ns")
                if isinstance(got, int) and got > 0:
                    t0[0] = got
            if t0[0] is None:  # an older capture: t0 is derived from its last event (kept till then)
                late.append((i, e.t_ns, e.wire_ns, extra.get("client"), cmd, rsp))
                return
            frames(i, e.t_ns, e.wire_ns, extra.get("client"), cmd, rsp)

        reader = CaptureReader(capture_path, on_event=on_event, on_op=_drop, typed=True)
        head = reader.read()
        n = counts["events"]
        if not n:
            raise UsageError(f"{capture_path}: no events to export; record with `tpmtop bench --events --json FILE`")
        if not counts["usable"]:
            if counts["kernel"] == n:
                raise UsageError(f"{capture_path}: a kernel capture (tpmtop kernel): the probes read only each "
                                 "command's header, so there are no bytes to put in a pcapng")
            raise UsageError(f"{capture_path}: its {n} events carry no command bytes (captures "
                             f"keep them for the newest commands only since this version); nothing to export")
        if late:
            t0[0] = _t0_from_created(head, counts["last_end"])
            for i, t, wn, key, cmd, rsp in late:
                frames(i, t, wn, key, cmd, rsp)
        w.close()
    return {"events": n, "exported": counts["usable"], "without_bytes": n - counts["usable"],
            "bad_hex": 0, "frames": w.frames, "streams": len(streams)}


def _drop(_row: Any) -> None:
    pass
