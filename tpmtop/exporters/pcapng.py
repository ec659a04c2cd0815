"""A capture as pcapng that Wireshark's TPM 2.0 dissector decodes.

The framing is the one tpm2-tss's ``pcap:`` TCTI writes: link type raw IPv4 (228), one TCP
segment per command (client → port 2321) and per response (2321 → client), the TPM bytes
as the payload with no simulator framing. Wireshark's ``tpm`` dissector is registered on TCP
port 2321 and tells commands from responses by direction. Frame timestamps are the
capture's own: the command at its start, the response at start + wire latency.

One TCP stream per client: events that carry a ``client`` (proxied traffic, imported files
with several connections) get one client address/port each; otherwise one stream.

Only events that kept their bytes (``command_hex``) can be exported; the rest are counted
and reported. Layer: exporters; no Textual.
"""

from __future__ import annotations

import datetime as _dt
import os

from tpmtop.errors import UsageError

LINKTYPE_IPV4 = 228
TPM_PORT = 2321
SERVER_IP = bytes([127, 0, 0, 1])
FIRST_CLIENT_PORT = 50000  # tpm2-tss's pcap TCTI uses 50000 for its one client


def _t0_unix_ns(cap: dict) -> int:
    """Wall clock of the capture's t_ns = 0."""
    t0 = cap.get("t0_unix_ns")
    if isinstance(t0, int) and t0 > 0:
        return t0
    # Older captures: "created" is when the capture was written, after the last event.
    try:
        created = _dt.datetime.fromisoformat(str(cap.get("created")))
        end = int(created.timestamp() * 1e9)
    except ValueError:
        end = 0
    last = max((e["t_ns"] + e.get("wire_ns", 0) for e in cap.get("events") or []), default=0)
    return max(end - last, 0)


class _Stream:
    def __init__(self, index: int):
        self.client_ip = bytes([127, 0, 0, 2 + index // 15000])
        self.client_port = FIRST_CLIENT_PORT + index % 15000
        self.cseq = 1_000 + 7919 * index
        self.sseq = 5_000_000 + 104729 * index

    def segment(self, payload: bytes, to_server: bool) -> bytes:
        import dpkt

        if to_server:
            seq, ack = self.cseq, self.sseq
            self.cseq = (self.cseq + len(payload)) & 0xFFFFFFFF
            src, dst, sport, dport = self.client_ip, SERVER_IP, self.client_port, TPM_PORT
        else:
            seq, ack = self.sseq, self.cseq
            self.sseq = (self.sseq + len(payload)) & 0xFFFFFFFF
            src, dst, sport, dport = SERVER_IP, self.client_ip, TPM_PORT, self.client_port
        tcp = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq, ack=ack, off=5,
                           flags=dpkt.tcp.TH_ACK | dpkt.tcp.TH_PUSH, win=65535, data=payload)
        ip = dpkt.ip.IP(src=src, dst=dst, p=dpkt.ip.IP_PROTO_TCP, ttl=64, data=tcp)
        ip.len = 20 + len(bytes(tcp))
        return bytes(ip)  # dpkt fills in both checksums


def export_pcapng(capture_path: str | os.PathLike, out) -> dict:
    """Write the pcapng to ``out`` (a path, or a checked :class:`tpmtop.output.Output`: a file,
    a device or FIFO written through, or stdout); returns counts. A capture without bytes is a
    UsageError (exit 2)."""
    import dpkt

    from tpmtop.atomic import open_atomic
    from tpmtop.capture import load_capture

    cap = load_capture(capture_path)
    events = cap.get("events")
    if not events:
        raise UsageError(f"{capture_path}: no events to export; record with `tpmtop bench --events --json FILE`")
    usable = [e for e in events if isinstance(e.get("command_hex"), str)]
    if not usable:
        if all(e.get("origin") == "kernel" for e in events):
            raise UsageError(f"{capture_path}: a kernel capture (tpmtop kernel): the probes read only each "
                             "command's header, so there are no bytes to put in a pcapng")
        raise UsageError(f"{capture_path}: its {len(events)} events carry no command bytes (captures "
                         f"keep them for the newest commands only since this version); nothing to export")
    t0 = _t0_unix_ns(cap)
    streams: dict[object, _Stream] = {}
    frames: list[tuple[int, int, bytes]] = []  # (ts_ns, order, ip packet)
    bad = 0
    for i, e in enumerate(usable):
        try:
            cmd = bytes.fromhex(e["command_hex"])
            rsp = bytes.fromhex(e["response_hex"]) if isinstance(e.get("response_hex"), str) else None
        except ValueError:
            bad += 1
            continue
        key = e.get("client")
        st = streams.get(key)
        if st is None:
            st = streams[key] = _Stream(len(streams))
        t = t0 + int(e["t_ns"])
        frames.append((t, 2 * i, st.segment(cmd, True)))
        if rsp is not None:
            frames.append((t + int(e.get("wire_ns") or 0), 2 * i + 1, st.segment(rsp, False)))
    frames.sort(key=lambda f: (f[0], f[1]))
    shb = dpkt.pcapng.SectionHeaderBlockLE(opts=[
        dpkt.pcapng.PcapngOptionLE(code=dpkt.pcapng.PCAPNG_OPT_SHB_USERAPPL, text="tpmtop"),
        dpkt.pcapng.PcapngOptionLE(code=dpkt.pcapng.PCAPNG_OPT_ENDOFOPT)])
    idb = dpkt.pcapng.InterfaceDescriptionBlockLE(linktype=LINKTYPE_IPV4, snaplen=65535, opts=[
        dpkt.pcapng.PcapngOptionLE(code=dpkt.pcapng.PCAPNG_OPT_IF_TSRESOL, data=b"\x09"),
        dpkt.pcapng.PcapngOptionLE(code=dpkt.pcapng.PCAPNG_OPT_ENDOFOPT)])
    opened = out.open() if hasattr(out, "open") else open_atomic(out, text=False)
    with opened as f:
        w = dpkt.pcapng.Writer(f, snaplen=65535, linktype=LINKTYPE_IPV4, shb=shb, idb=idb)
        for ts_ns, _, pkt in frames:
            # An EPB of our own: dpkt's writepkt(ts=float) rounds to microseconds, and the
            # interface says nanoseconds (if_tsresol 9), so the original timestamps survive.
            w.writepkt(dpkt.pcapng.EnhancedPacketBlockLE(
                ts_high=ts_ns >> 32, ts_low=ts_ns & 0xFFFFFFFF, caplen=len(pkt), pkt_len=len(pkt), pkt_data=pkt))
    return {"events": len(events), "exported": len(usable) - bad, "without_bytes": len(events) - len(usable),
            "bad_hex": bad, "frames": len(frames), "streams": len(streams)}
