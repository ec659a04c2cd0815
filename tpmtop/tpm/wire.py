"""Cheap decoding of TPM command and response buffers for the recorder's hot path.

Only the 10-byte headers, the handle area and the authorization area are read (a few µs).
The number of handles per command comes from tpm2-pytss's command parser classes, looked up
once per command code. Nothing here raises on bad bytes: a short or garbled buffer comes
back flagged, because the recorder must record whatever went on the wire.
Full parameter decoding (tpm2-pytss ``command_parser``, ~120 µs) is :func:`full_decode`,
called only when someone looks at one command.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from tpmtop.tpm.cc_table import HANDLES

# The four values the header/authorization decoder needs, spelled here rather than taken from
# tpm2_pytss.constants: building the CLI's parser imports this module (chip profiles ->
# wire), and importing tpm2-pytss costs ~55 ms that `tpmtop boot` over SSH must not pay.
# tests/tpm/test_transport.py pins each to its tpm2_pytss.constants name.
TPM_ST_NO_SESSIONS = 0x8001  # TPM2_ST.NO_SESSIONS
TPM_ST_SESSIONS = 0x8002  # TPM2_ST.SESSIONS
TPM_RS_PW = 0x40000009  # TPM2_RH.PW: the password "session" handle, not a session anyone holds
CC_FLUSH_CONTEXT = 0x165  # TPM2_CC.FlushContext

_HDR = struct.Struct(">HII")
_U32 = struct.Struct(">I")

# TPM2_CC.FIRST..LAST: a code in this range missing from the table is asked of tpm2-pytss
_LIBRARY_RANGE = (0x11F, 0x1FF)
_handle_counts: dict[int, int | None] = {}
_rsp_has_handle: dict[int, bool] = {}


def num_handles(cc: int) -> int | None:
    """Handles in the command's handle area, or None for a command tpm2-pytss doesn't know."""
    n = _handle_counts.get(cc)
    if n is None and cc not in _handle_counts:
        known = HANDLES.get(cc)
        if known is not None:
            n = known[0]
        elif _LIBRARY_RANGE[0] <= cc <= _LIBRARY_RANGE[1]:  # a command newer than the table
            try:
                from tpm2_pytss.command_parser import tpm2_command
                from tpm2_pytss.constants import TPM2_CC

                n = tpm2_command.lookup_command_class(TPM2_CC(cc)).num_handles()
            except Exception:
                n = None
        _handle_counts[cc] = n
    return n


def response_has_handle(cc: int) -> bool:
    v = _rsp_has_handle.get(cc)
    if v is None:
        known = HANDLES.get(cc)
        if known is not None:
            v = known[1]
        elif _LIBRARY_RANGE[0] <= cc <= _LIBRARY_RANGE[1]:
            try:
                from tpm2_pytss.command_parser import tpm2_response
                from tpm2_pytss.constants import TPM2_CC

                v = tpm2_response.lookup_response_class(TPM2_CC(cc)).has_handle()
            except Exception:
                v = False
        else:
            v = False
        _rsp_has_handle[cc] = v
    return v


def warm() -> None:
    """Fill the per-command caches for every command code in the table, so no decode pays a
    first look-up. Called when a TPM connection opens: never inside a measured operation.
    (It used to import tpm2-pytss's command parser, ~150 ms; :mod:`tpmtop.tpm.cc_table`
    holds what the decoder needs from it.)"""
    for cc in HANDLES:
        num_handles(cc)
        response_has_handle(cc)


@dataclass(slots=True)
class CommandInfo:
    cc: int | None
    size: int
    handles: tuple[int, ...]
    sessions: tuple[tuple[int, int], ...]  # (session handle, attributes)
    flush_handle: int | None  # the parameter of TPM2_FlushContext
    garbled: bool


@dataclass(slots=True)
class ResponseInfo:
    rc: int | None
    size: int
    handle: int | None  # the response handle (object or session created)
    garbled: bool


_U16 = struct.Struct(">H")
_HANDLES = [struct.Struct(">" + "I" * n) for n in range(8)]


def decode_command(buf: bytes) -> CommandInfo:
    n = len(buf)
    if n < 10:
        return CommandInfo(None, n, (), (), None, True)
    tag, size, cc = _HDR.unpack_from(buf, 0)
    garbled = size != n or (tag != TPM_ST_SESSIONS and tag != TPM_ST_NO_SESSIONS)
    nh = _handle_counts.get(cc, -1)
    if nh == -1:
        nh = num_handles(cc)
    if nh is None:
        return CommandInfo(cc, n, (), (), None, garbled)
    off = 10 + 4 * nh
    if off > n:
        return CommandInfo(cc, n, (), (), None, True)
    handles = _HANDLES[nh].unpack_from(buf, 10) if nh < 8 else ()
    sessions: tuple[tuple[int, int], ...] = ()
    if tag == TPM_ST_SESSIONS:
        found = []
        try:
            end = off + 4 + _U32.unpack_from(buf, off)[0]
            off += 4
            if end > n:
                raise IndexError
            while off < end:
                sh = _U32.unpack_from(buf, off)[0]
                nlen = _U16.unpack_from(buf, off + 4)[0]
                attrs = buf[off + 6 + nlen]
                off += 9 + nlen + _U16.unpack_from(buf, off + 7 + nlen)[0]
                found.append((sh, attrs))
            if off != end:
                garbled = True
        except (struct.error, IndexError):
            return CommandInfo(cc, n, handles, tuple(found), None, True)
        sessions = tuple(found)
    flush_handle = None
    if cc == CC_FLUSH_CONTEXT and off + 4 <= n:
        flush_handle = _U32.unpack_from(buf, off)[0]
    return CommandInfo(cc, n, handles, sessions, flush_handle, garbled)


def decode_response(buf: bytes | None, cc: int | None) -> ResponseInfo:
    if not buf:
        return ResponseInfo(None, 0, None, True)
    n = len(buf)
    if n < 10:
        return ResponseInfo(None, n, None, True)
    tag, size, rc = _HDR.unpack_from(buf, 0)
    garbled = size != n or tag not in (TPM_ST_NO_SESSIONS, TPM_ST_SESSIONS)
    handle = None
    if rc == 0 and cc is not None and n >= 14 and response_has_handle(cc):
        (handle,) = _U32.unpack_from(buf, 10)
    return ResponseInfo(rc, n, handle, garbled)


def full_decode(command: bytes, response: bytes | None = None) -> dict[str, Any]:
    """Everything tpm2-pytss can tell about one command (and its response), as text.

    Slow (~120 µs); never on the hot path. Failures are reported in the result.
    """
    import io

    from tpm2_pytss import command_parser as cp

    out: dict[str, Any] = {}
    try:
        cmd = cp.read_command(io.BytesIO(command))
        out["command"] = repr(cmd)
        cc = cmd.command_code
    except Exception as e:  # decoding arbitrary wire bytes: any failure is data, not a crash
        out["command_error"] = f"{type(e).__name__}: {e}"
        cc = None
    if response is not None and cc is not None:
        try:
            out["response"] = repr(cp.read_response(io.BytesIO(response), cc))
        except Exception as e:
            out["response_error"] = f"{type(e).__name__}: {e}"
    return out
