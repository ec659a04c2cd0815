"""Names for command codes, response codes and handles, from tpm2-pytss's own tables.

Spec spellings ("TPM2_CC_PCR_Extend") are built from tpm2-pytss's ``TPM2_CC`` attribute
names; response codes are worded by tpm2-tss's ``Tss2_RC_Decode`` (what tpm2_rc_decode
prints). Both are cached: the recorder asks on every command.
"""

from __future__ import annotations

from enum import StrEnum
from functools import lru_cache

from tpm2_pytss.constants import TPM2_CC, TPM2_HR, TPM2_HT, TPM2_RC, TSS2_RC


def _build_cc_tables() -> tuple[dict[int, str], dict[str, int]]:
    by_code: dict[int, str] = {}
    for attr in dir(TPM2_CC):
        if attr.startswith("_") or not attr[0].isupper() or attr in ("FIRST", "LAST"):
            continue
        value = getattr(TPM2_CC, attr)
        if isinstance(value, int):
            by_code.setdefault(int(value), f"TPM2_CC_{attr}")
    return by_code, {v: k for k, v in by_code.items()}


CC_NAMES, CC_BY_NAME = _build_cc_tables()


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
        return str(TSS2_RC(rc).decode())
    except Exception:  # an rc tpm2-tss cannot word is still shown, as hex
        return f"unknown response code 0x{rc:x}"


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
        return _HANDLE_TYPES.get(handle >> TPM2_HR.SHIFT, cls.UNKNOWN)


_HANDLE_TYPES = {
    int(TPM2_HT.PCR): HandleType.PCR,
    int(TPM2_HT.NV_INDEX): HandleType.NV_INDEX,
    int(TPM2_HT.HMAC_SESSION): HandleType.HMAC_SESSION,
    int(TPM2_HT.POLICY_SESSION): HandleType.POLICY_SESSION,
    int(TPM2_HT.PERMANENT): HandleType.PERMANENT,
    int(TPM2_HT.TRANSIENT): HandleType.TRANSIENT,
    int(TPM2_HT.PERSISTENT): HandleType.PERSISTENT,
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
    int(TPM2_RC.OBJECT_MEMORY): "the TPM's transient object slots are full (handles leaked by some client?): "
           "see `tpmtop handles` and free them with `tpmtop flush HANDLE`",
    int(TPM2_RC.SESSION_MEMORY): "the TPM's loaded-session slots are full: see `tpmtop handles` for sessions some "
           "client left loaded",
    int(TPM2_RC.SESSION_HANDLES): "the TPM has no free session handles (TPM2_PT_ACTIVE_SESSIONS_MAX reached): "
           "saved sessions are held by some client; see `tpmtop handles`",
    int(TPM2_RC.CONTEXT_GAP): "TPM_RC_CONTEXT_GAP: a long-saved session blocks further context saves until it is "
           "loaded and saved again, or flushed; see `tpmtop handles` (saved sessions)",
}


def rc_hint(rc: int | None) -> str | None:
    if rc is None:
        return None
    return _HINTS.get(rc) or _HINTS.get(rc_base(rc))
