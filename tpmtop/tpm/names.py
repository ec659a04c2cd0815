"""Names for command codes, response codes and handles, from tpm2-pytss's own tables.

Spec spellings ("TPM2_CC_PCR_Extend") are tpm2-pytss's ``TPM2_CC`` attribute names, kept in
:mod:`tpmtop.tpm.cc_table` (importing tpm2-pytss costs `tpmtop info` 75–230 ms before its first
command; tests/test_transport.py checks the table against the library); response codes are
worded by tpm2-tss's ``Tss2_RC_Decode`` (what tpm2_rc_decode prints), imported when the first
non-zero one is worded. Both are cached: the recorder asks on every command.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from functools import lru_cache
from typing import cast

from tpmtop.tpm.cc_table import NAMES

# The TPM 2.0 numbers used here (spec Part 2), spelled rather than taken from
# tpm2_pytss.constants for the same reason; tests/test_transport.py pins each to its name there.
HR_SHIFT = 24  # TPM2_HR.SHIFT: a handle's top byte is its type (TPM_HT)
HT_PCR, HT_NV_INDEX, HT_HMAC_SESSION, HT_POLICY_SESSION = 0x00, 0x01, 0x02, 0x03  # TPM2_HT.…
HT_PERMANENT, HT_TRANSIENT, HT_PERSISTENT = 0x40, 0x80, 0x81  # TPM2_HT.…
RC_INITIALIZE = 0x100  # TPM2_RC.INITIALIZE
RC_CONTEXT_GAP, RC_OBJECT_MEMORY, RC_SESSION_MEMORY = 0x901, 0x902, 0x903  # TPM2_RC.…
RC_SESSION_HANDLES = 0x905  # TPM2_RC.SESSION_HANDLES
RC_VALUE, RC_HIERARCHY, RC_HANDLE, RC_INTEGRITY = 0x084, 0x085, 0x08B, 0x09F  # TPM2_RC.… (format one)
RC_REFERENCE_S0, RC_REFERENCE_S6 = 0x918, 0x91E  # TPM2_RC.…: session 0..6 not loaded

CC_NAMES = {code: f"TPM2_CC_{name}" for code, name in NAMES.items()}
CC_BY_NAME = {v: k for k, v in CC_NAMES.items()}


def cc_name(cc: int | None) -> str:
    if cc is None:
        return "(garbled)"
    return CC_NAMES.get(cc, f"TPM2_CC_0x{cc:08x}")


def cc_short(cc: int | None) -> str:
    """``PCR_Extend`` for tables where the prefix is noise."""
    return cc_name(cc).removeprefix("TPM2_CC_")


def cc_from_name(name: str) -> int | None:
    if name.startswith("TPM2_CC_"):
        return CC_BY_NAME.get(name)
    return CC_BY_NAME.get("TPM2_CC_" + name)


@lru_cache(maxsize=4096)
def rc_text(rc: int | None) -> str:
    """The response code as tpm2_rc_decode words it; ``success`` for 0."""
    if rc is None:
        return "(no response)"
    if rc == 0:
        return "success"
    try:
        if not 0 <= rc <= 0xFFFFFFFF:
            raise ValueError(rc)
        decode = _tss2_rc_decode()
        if decode is not None:
            return str(decode(rc).decode("utf-8", "replace"))
        from tpm2_pytss.constants import TSS2_RC

        return str(TSS2_RC(rc).decode())
    except Exception:  # an rc tpm2-tss cannot word is still shown, as hex
        return f"unknown response code 0x{rc:x}"


@lru_cache(maxsize=1)
def _tss2_rc_decode() -> Callable[[int], bytes] | None:
    """tpm2-tss's ``Tss2_RC_Decode`` (libtss2-rc), called through ctypes: the function
    tpm2-pytss's ``TSS2_RC.decode`` calls, without importing tpm2-pytss — which cost `tpmtop
    run`'s report 0.9 s at load 10 when the first failed command was worded. The words come
    back in a per-thread buffer of the library's, copied at once (``c_char_p``)."""
    import ctypes

    try:
        fn = ctypes.CDLL("libtss2-rc.so.0").Tss2_RC_Decode
    except (OSError, AttributeError):
        return None  # then tpm2-pytss words it
    fn.restype = ctypes.c_char_p
    fn.argtypes = [ctypes.c_uint32]
    return cast("Callable[[int], bytes]", fn)


def rc_base(rc: int) -> int:
    """The format-one / format-zero base code without handle/session/parameter numbers."""
    if rc & 0x80:  # format one: bits 6 and 8-11 say which handle/session/parameter
        return (rc & 0x3F) | 0x80
    return rc


class HandleType(StrEnum):
    """What a handle names, by its top byte (TPM_HT, spec Part 2). Not
    :class:`tpmtop.tpm.handles.HandleKind`, which is how ``tpmtop handles`` groups what the TPM lists
    (loaded and saved sessions apart, HMAC and policy together)."""

    PCR = "pcr"
    NV_INDEX = "nv-index"
    HMAC_SESSION = "hmac-session"
    POLICY_SESSION = "policy-session"
    PERMANENT = "permanent"
    TRANSIENT = "transient"
    PERSISTENT = "persistent"
    UNKNOWN = "unknown"

    @classmethod
    def of(cls, handle: int) -> HandleType:
        return _HANDLE_TYPES.get(handle >> HR_SHIFT, cls.UNKNOWN)


_HANDLE_TYPES = {
    HT_PCR: HandleType.PCR,
    HT_NV_INDEX: HandleType.NV_INDEX,
    HT_HMAC_SESSION: HandleType.HMAC_SESSION,
    HT_POLICY_SESSION: HandleType.POLICY_SESSION,
    HT_PERMANENT: HandleType.PERMANENT,
    HT_TRANSIENT: HandleType.TRANSIENT,
    HT_PERSISTENT: HandleType.PERSISTENT,
}


def handle_kind(handle: int) -> HandleType:
    return HandleType.of(handle)


SESSION_ATTR_BITS = (
    (0x01, "continueSession"),
    (0x02, "auditExclusive"),
    (0x04, "auditReset"),
    (0x20, "decrypt"),
    (0x40, "encrypt"),
    (0x80, "audit"),
)


def session_attr_text(attrs: int) -> str:
    names = [n for bit, n in SESSION_ATTR_BITS if attrs & bit]
    return "|".join(names) if names else "0"


# What to do about the response codes an operator meets when a TPM is full or was reset.
_HINTS = {
    RC_OBJECT_MEMORY: "the TPM's transient object slots are full (handles leaked by some client?): "
           "see `tpmtop handles` and free them with `tpmtop flush HANDLE`",
    RC_SESSION_MEMORY: "the TPM's loaded-session slots are full: see `tpmtop handles` for sessions some "
           "client left loaded",
    RC_SESSION_HANDLES: "the TPM has no free session handles (TPM2_PT_ACTIVE_SESSIONS_MAX reached): "
           "saved sessions are held by some client; see `tpmtop handles`",
    RC_CONTEXT_GAP: "TPM_RC_CONTEXT_GAP: a long-saved session blocks further context saves until it is "
           "loaded and saved again, or flushed; see `tpmtop handles` (saved sessions)",
}


def rc_hint(rc: int | None) -> str | None:
    if rc is None:
        return None
    return _HINTS.get(rc) or _HINTS.get(rc_base(rc))
