"""A capture built from TPM traffic tpmtop watched rather than sent (pcap files, the kernel).

Such traffic has no engine, mode or operation: every command is its own operation, so the
capture gets one run per origin (``engine`` = "observed", ``mode`` = the origin such as
"kernel" or "imported", ``op`` = "command") whose op/wire latencies are the per-command wire latencies and whose
host time is zero (nothing is known about it). Events carry the raw bytes as
``command_hex``/``response_hex`` when they are known, and ``client`` when the traffic had
more than one client — the fields ``tpmtop export --format pcapng`` reads back.

Layer: importers (beside exporters); no Textual.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tpmtop.tpm import names, wire

# rc_text of a command that was answered but whose response code no probe could read (a
# user-space command seen by kernel probes without tpm2_commit_space): not an error, not
# "(no response)".
RC_NOT_TRACED = "response code not traced"


@dataclass
class ObservedExchange:
    """One command and its response as seen from outside the client."""

    t_unix_ns: int  # wall clock when the command started
    wire_ns: int  # command start to end of response
    command: bytes | None
    response: bytes | None
    client: str | None = None
    cc: int | None = None  # when the bytes are not known (kernel probes read only the header)
    rc: int | None = None
    answered: bool | None = None  # a response came though its rc is unknown (kernel, user space)
    extra: dict[str, Any] = field(default_factory=dict)


def event_dict(x: ObservedExchange, t0_unix_ns: int, origin: str) -> dict[str, Any]:
    if x.command is not None:
        info = wire.decode_command(x.command)
        cc, handles, sessions = info.cc, info.handles, info.sessions
    else:
        cc, handles, sessions = x.cc, (), ()
    rc = x.rc
    if x.response is not None:
        rc = wire.decode_response(x.response, cc).rc
    e = {
        "t_ns": max(x.t_unix_ns - t0_unix_ns, 0), "command": names.cc_name(cc),
        "handles": [f"0x{h:08x}" for h in handles],
        "sessions": [{"handle": f"0x{h:08x}", "attrs": a} for h, a in sessions],
        "rc": rc, "rc_text": names.rc_text(rc), "wire_ns": max(x.wire_ns, 0), "origin": origin,
        "engine": None, "mode": None, "op": None, "op_seq": None,
    }
    if x.command is not None:
        e["command_hex"] = x.command.hex()
    if x.response is not None:
        e["response_hex"] = x.response.hex()
    if x.client is not None:
        e["client"] = x.client
    e.update(x.extra)
    return e


def _tpm_identity(exchanges: list[ObservedExchange]) -> dict[str, Any]:
    """TPM2_PT_MANUFACTURER etc. from a GetCapability(TPM_PROPERTIES) answer in the traffic."""
    found: dict[int, int] = {}
    for x in exchanges:
        c, r = x.command, x.response
        if not c or not r or len(c) < 22 or len(r) < 19 or int.from_bytes(c[6:10], "big") != 0x17A:
            continue
        if int.from_bytes(r[6:10], "big") != 0 or int.from_bytes(c[10:14], "big") != 6:
            continue
        n = int.from_bytes(r[15:19], "big")
        for i in range(n):
            off = 19 + 8 * i
            if off + 8 > len(r):
                break
            found[int.from_bytes(r[off:off + 4], "big")] = int.from_bytes(r[off + 4:off + 8], "big")

    def text(*props: int) -> str:
        raw = b"".join(found[p].to_bytes(4, "big") for p in props if p in found)
        return raw.rstrip(b"\0").decode("ascii", "replace").strip()

    fw = ""
    if 0x10B in found:
        fw = f"{found[0x10B] >> 16}.{found[0x10B] & 0xFFFF}"
    return {"manufacturer": text(0x105), "vendor": text(0x106, 0x107, 0x108, 0x109), "firmware": fw}


def capture_from_exchanges(exchanges: list[ObservedExchange], *, origin: str, source: str,
                           simulated: bool = False, extra: dict[str, Any] | None = None,
                           served_here: bool = False) -> dict[str, Any]:
    """The ``tpmtop.capture/1`` document for observed traffic (events in time order).
    ``served_here``: the exchanges went through this tpmtop's own transport (the lab serves
    its guests' TPM), so the capture records the tuning knobs in force."""
    from tpmtop.capture.build import capture_head
    from tpmtop.stats import LatencyHistogram

    exchanges = sorted(exchanges, key=lambda x: x.t_unix_ns)
    t0 = exchanges[0].t_unix_ns if exchanges else 0
    events = [event_dict(x, t0, origin) for x in exchanges]
    per_origin: dict[str, list[tuple[dict[str, Any], bool]]] = {}
    for x, e in zip(exchanges, events, strict=False):
        # the latency counts when an answer came, even one whose response code nobody saw
        per_origin.setdefault(e["origin"], []).append((e, e["rc"] is not None or bool(x.answered)))
    runs = []
    for org, evs in per_origin.items():
        # host_us stays empty: nothing is known about the client's side of observed traffic
        op_h, zero = LatencyHistogram(), LatencyHistogram()
        per_cc: dict[str, LatencyHistogram] = {}
        errors = 0
        counts: dict[str, int] = {}
        for e, answered in evs:
            if not answered:
                errors += 1
                continue
            op_h.record(e["wire_ns"])
            # not setdefault(…, LatencyHistogram()): that built (and dropped) an 18,000-slot HDR
            # histogram per event — 12 of 95 s profiled on a 120,000-command import
            h = per_cc.get(e["command"])
            if h is None:
                h = per_cc[e["command"]] = LatencyHistogram()
            h.record(e["wire_ns"])
            counts[e["command"]] = counts.get(e["command"], 0) + 1
            errors += bool(e["rc"]) and not e.get("expected")

        n = op_h.count if isinstance(op_h.count, int) else op_h.count()
        # one key for all observed traffic, so two such captures (kernel 6.10 vs 6.12, two
        # pcap files) compare command by command in `tpmtop compare`
        runs.append({"engine": "observed", "mode": org, "op": "command", "ops": n, "errors": errors,
                     "op_us": op_h.to_json(), "wire_us": op_h.to_json(), "host_us": zero.to_json(),
                     "commands_per_op": {k: round(v / n, 4) for k, v in counts.items()} if n else {},
                     "commands": {k: h.to_json() for k, h in per_cc.items()}})
    ident = _tpm_identity(exchanges)
    # swtpm and the IBM simulator answer "IBM" / "SW   TPM"
    sim = simulated or (ident["manufacturer"] == "IBM" and ident["vendor"].startswith("SW"))
    cap = capture_head({"tcti": source, **ident, "simulated": sim}, runs, recorded_here=False, tuned=served_here)
    cap |= {"t0_unix_ns": t0, "events": events}
    if extra:
        cap.update(extra)
    return cap
