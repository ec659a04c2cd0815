"""The few raw commands tpmtop sends itself (without ESAPI): GetCapability, FlushContext,
ReadPublic. Raw because the dashboard polls them every second and ESAPI's per-call OpenSSL
look-ups would cost more than the TPM does.

Marshalled and unmarshalled here, by the structures of TPM 2.0 Part 2 (TPMS_CAPABILITY_DATA,
TPML_HANDLE, TPML_TAGGED_TPM_PROPERTY) and Part 3 (TPM2_GetCapability): these are the
commands of ``tpmtop info`` and ``tpmtop handles``, which must not pay tpm2-pytss's import
(75–230 ms) over SSH. tests/test_transport.py reads the same answers with tpm2-pytss's
TPMS_CAPABILITY_DATA on a real swtpm and compares.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Protocol

from tpmtop.errors import TpmError
from tpmtop.tpm import names
from tpmtop.tpm.names import HR_SHIFT, HT_HMAC_SESSION, HT_POLICY_SESSION
from tpmtop.tpm.wire import CC_FLUSH_CONTEXT, TPM_ST_NO_SESSIONS


class Transacts(Protocol):
    """Anything that sends a command and returns the response: a transport, a backend."""

    def transact(self, command: bytes) -> bytes: ...


# Spelled here (spec Part 2) rather than taken from tpm2_pytss.constants, for the import (the
# tag and FlushContext are tpmtop.tpm.wire's); tests/test_transport.py pins each to its name there.
CC_GET_CAPABILITY = 0x17A  # TPM2_CC.GetCapability
CC_READ_PUBLIC = 0x173  # TPM2_CC.ReadPublic

TPM_CAP_HANDLES = 0x1  # TPM2_CAP.HANDLES
TPM_CAP_TPM_PROPERTIES = 0x6  # TPM2_CAP.TPM_PROPERTIES

_U32 = struct.Struct(">I")


class CapabilityData(NamedTuple):
    """One TPMS_CAPABILITY_DATA of the two kinds tpmtop asks for."""

    capability: int  # TPM_CAP
    handles: tuple[int, ...] = ()  # TPML_HANDLE, for TPM_CAP_HANDLES
    properties: tuple[tuple[int, int], ...] = ()  # TPML_TAGGED_TPM_PROPERTY: (TPM_PT, value)


def parse_capability(body: bytes) -> tuple[bool, CapabilityData]:
    """A GetCapability response's parameters (after the 10-byte header of a no-sessions
    response): moreData (TPMI_YES_NO), then TPMS_CAPABILITY_DATA. Raises TpmError on a
    truncated answer or a capability tpmtop did not ask for."""
    try:
        more = body[0] == 1
        cap, count = struct.unpack_from(">II", body, 1)
        if cap == TPM_CAP_HANDLES:
            handles = struct.unpack_from(f">{count}I", body, 9)
            return more, CapabilityData(cap, handles=handles)
        if cap == TPM_CAP_TPM_PROPERTIES:
            flat = struct.unpack_from(f">{2 * count}I", body, 9)
            return more, CapabilityData(cap, properties=tuple(zip(flat[::2], flat[1::2], strict=True)))
    except (IndexError, struct.error):
        raise TpmError(f"GetCapability: malformed response ({len(body)} bytes of parameters)", None,
                       names.cc_name(CC_GET_CAPABILITY)) from None
    raise TpmError(f"GetCapability: the TPM answered capability 0x{cap:x}, not the one asked for", None,
                   names.cc_name(CC_GET_CAPABILITY))


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


def get_capability(transport: Transacts, cap: int, prop: int, count: int) -> tuple[bool, CapabilityData]:
    rsp = transport.transact(build(CC_GET_CAPABILITY, struct.pack(">III", cap, prop, count)))
    return parse_capability(check(rsp, CC_GET_CAPABILITY))


def get_properties(transport: Transacts, first: int, count: int = 128) -> dict[int, int]:
    """TPM_PT properties from ``first`` on, looping while moreData."""
    out: dict[int, int] = {}
    prop = first
    group = first & 0xFFFFFF00
    while True:
        more, data = get_capability(transport, TPM_CAP_TPM_PROPERTIES, prop, count)
        props = data.properties
        for pt, value in props:
            if (pt & 0xFFFFFF00) != group:
                return out
            out[pt] = value
        if not more or not props:
            return out
        prop = props[-1][0] + 1


_SESSION_TYPES = frozenset((HT_HMAC_SESSION, HT_POLICY_SESSION))


def get_handles(transport: Transacts, first: int, count: int = 64) -> list[int]:
    """Every handle of one type (the top byte of ``first``), looping while moreData:
    GetCapability's count bounds one answer, and a TPM may return fewer than asked."""
    out: list[int] = []
    prop = first
    # Session lists (loaded 0x02…, saved 0x03…) hold HMAC (0x02…) and policy (0x03…) handles.
    tops: frozenset[int] = frozenset({first >> HR_SHIFT})
    if tops <= _SESSION_TYPES:
        tops = _SESSION_TYPES
    while True:
        more, data = get_capability(transport, TPM_CAP_HANDLES, prop, count)
        got = data.handles
        out.extend(h for h in got if h >> HR_SHIFT in tops)
        if not more or not got:
            return out
        prop = got[-1] + 1
        if prop >> HR_SHIFT not in tops:
            return out


def flush_context(transport: Transacts, handle: int) -> None:
    check(transport.transact(build(CC_FLUSH_CONTEXT, struct.pack(">I", handle))), CC_FLUSH_CONTEXT)
