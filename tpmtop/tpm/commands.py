"""The few raw commands tpmtop sends itself (without ESAPI): GetCapability, FlushContext,
ReadPublic. Parameters are marshalled with tpm2-pytss types; the header by hand (10 bytes).
Raw because the dashboard polls them every second and ESAPI's per-call OpenSSL look-ups
would cost more than the TPM does.
"""

from __future__ import annotations

import struct
from typing import Protocol

from tpm2_pytss.constants import TPM2_CAP, TPM2_CC, TPM2_HR, TPM2_HT, TPM2_ST
from tpm2_pytss.types import TPMS_CAPABILITY_DATA

from tpmtop.errors import TpmError
from tpmtop.tpm import names


class Transacts(Protocol):
    """Anything that sends a command and returns the response: a transport, a backend."""

    def transact(self, command: bytes) -> bytes: ...


TPM_ST_NO_SESSIONS = int(TPM2_ST.NO_SESSIONS)
CC_GET_CAPABILITY = int(TPM2_CC.GetCapability)
CC_FLUSH_CONTEXT = int(TPM2_CC.FlushContext)
CC_READ_PUBLIC = int(TPM2_CC.ReadPublic)

TPM_CAP_HANDLES = int(TPM2_CAP.HANDLES)
TPM_CAP_TPM_PROPERTIES = int(TPM2_CAP.TPM_PROPERTIES)


def build(cc: int, body: bytes = b"", tag: int = TPM_ST_NO_SESSIONS) -> bytes:
    return struct.pack(">HII", tag, 10 + len(body), cc) + body


def check(rsp: bytes, cc: int) -> bytes:
    """Return the response body after the header; raise TpmError on a non-zero rc."""
    if len(rsp) < 10:
        raise TpmError(f"{names.cc_short(cc)}: short response ({len(rsp)} bytes)", None, names.cc_name(cc))
    rc = struct.unpack_from(">I", rsp, 6)[0]
    if rc:
        raise TpmError(f"{names.cc_short(cc)} failed: 0x{rc:03x} {names.rc_text(rc)}", rc, names.cc_name(cc))
    return rsp[10:]


def get_capability(transport: Transacts, cap: int, prop: int, count: int) -> tuple[bool, TPMS_CAPABILITY_DATA]:
    rsp = transport.transact(build(CC_GET_CAPABILITY, struct.pack(">III", cap, prop, count)))
    body = check(rsp, CC_GET_CAPABILITY)
    more = body[0] == 1
    data, _ = TPMS_CAPABILITY_DATA.unmarshal(body[1:])
    return more, data


def get_properties(transport: Transacts, first: int, count: int = 128) -> dict[int, int]:
    """TPM_PT properties from ``first`` on, looping while moreData."""
    out: dict[int, int] = {}
    prop = first
    group = first & 0xFFFFFF00
    while True:
        more, data = get_capability(transport, TPM_CAP_TPM_PROPERTIES, prop, count)
        props = list(data.data.tpmProperties)
        for p in props:
            if (int(p.property) & 0xFFFFFF00) != group:
                return out
            out[int(p.property)] = int(p.value)
        if not more or not props:
            return out
        prop = int(props[-1].property) + 1


_SESSION_TYPES = frozenset(int(t) for t in (TPM2_HT.HMAC_SESSION, TPM2_HT.POLICY_SESSION))


def get_handles(transport: Transacts, first: int, count: int = 64) -> list[int]:
    """Every handle of one type (the top byte of ``first``), looping while moreData:
    GetCapability's count bounds one answer, and a TPM may return fewer than asked."""
    out: list[int] = []
    prop = first
    # Session lists (loaded 0x02…, saved 0x03…) hold HMAC (0x02…) and policy (0x03…) handles.
    tops: frozenset[int] = frozenset({first >> TPM2_HR.SHIFT})
    if tops <= _SESSION_TYPES:
        tops = _SESSION_TYPES
    while True:
        more, data = get_capability(transport, TPM_CAP_HANDLES, prop, count)
        got = [int(h) for h in data.data.handles]
        out.extend(h for h in got if h >> TPM2_HR.SHIFT in tops)
        if not more or not got:
            return out
        prop = got[-1] + 1
        if prop >> TPM2_HR.SHIFT not in tops:
            return out


def flush_context(transport: Transacts, handle: int) -> None:
    check(transport.transact(build(CC_FLUSH_CONTEXT, struct.pack(">I", handle))), CC_FLUSH_CONTEXT)
