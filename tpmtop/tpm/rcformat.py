"""The format of a TPM response code (TPM 2.0 Part 2, TPM_RC), as the dictionary-attack logic needs it.

A format-one code (bit 7 set) carries an error number in bits 0-5 and says where it applies:
bit 6 (TPM_RC_P) set, bits 8-11 are a parameter number; clear, bits 8-11 are a handle number
(1-7) or, with bit 11 set, a session number (bits 8-10). So 0x98E is TPM_RC_AUTH_FAIL on
session 1 and 0x9A2 TPM_RC_BAD_AUTH on session 1; 0x18E the same failure on handle 1.
Only layer 0 (the TPM itself: bits 16-31 clear) is a TPM's answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tpmtop.tpm.names import rc_base

RC_FMT1 = 0x080
RC_P = 0x040
RC_AUTH_FAIL = RC_FMT1 + 0x00E  # 0x08E: the authorization HMAC check failed, DA counted
RC_BAD_AUTH = RC_FMT1 + 0x022  # 0x0A2: the same failure on an entity the DA logic exempts (noDA)
RC_LOCKOUT = 0x921  # TPM_RC_WARN + 0x021: the TPM is in DA lockout
RC_RETRY = 0x922  # TPM_RC_WARN + 0x022 (wolfTPM #537: the DA counter's NV write)


class Where(StrEnum):
    HANDLE = "handle"
    SESSION = "session"
    PARAMETER = "parameter"
    NONE = "none"


@dataclass(frozen=True)
class DecodedRc:
    rc: int
    base: int  # the code without its handle/session/parameter number
    where: Where
    number: int  # which handle/session/parameter (1-based), 0 when none

    @property
    def position(self) -> str:
        return f"{self.where.value} {self.number}" if self.where is not Where.NONE else ""


def decode(rc: int) -> DecodedRc | None:
    """The code's parts; None for a code that is not a TPM's (a TSS layer, out of range)."""
    if not 0 <= rc <= 0xFFFF:
        return None
    base = rc_base(rc)
    if not rc & RC_FMT1:
        return DecodedRc(rc, base, Where.NONE, 0)
    n = (rc >> 8) & 0xF
    if rc & RC_P:
        return DecodedRc(rc, base, Where.PARAMETER, n)
    if n & 0x8:
        return DecodedRc(rc, base, Where.SESSION, n & 0x7)
    return DecodedRc(rc, base, Where.HANDLE, n) if n else DecodedRc(rc, base, Where.NONE, 0)


def is_auth_failure(rc: int | None) -> bool:
    """TPM_RC_AUTH_FAIL or TPM_RC_BAD_AUTH at any handle/session/parameter position.

    Both are a wrong authValue; only AUTH_FAIL moved the lockout counter (BAD_AUTH: the entity
    has noDA). An operator asking "who sent a wrong password" wants both, each said as what it is."""
    if rc is None:
        return False
    d = decode(rc)
    return d is not None and d.base in (RC_AUTH_FAIL, RC_BAD_AUTH)


def auth_failure_text(rc: int | None) -> str | None:
    """``wrong password: 0x98e on session 1, counted towards lockout`` (None: not one)."""
    if not is_auth_failure(rc):
        return None
    assert rc is not None
    d = decode(rc)
    assert d is not None
    pos = f" on {d.position}" if d.position else ""
    if d.base == RC_AUTH_FAIL:
        return f"wrong password: 0x{rc:x} TPM_RC_AUTH_FAIL{pos}, counted towards the TPM's dictionary-attack lockout"
    return f"wrong password: 0x{rc:x} TPM_RC_BAD_AUTH{pos} (noDA entity: not counted towards lockout)"
