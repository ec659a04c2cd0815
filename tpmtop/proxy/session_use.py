"""What a client's StartAuthSession asked for (parsed from the command's bytes), and the
session attributes it used the session with: the proxy's per-session record."""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any

TPM_RH_NULL = 0x40000007


class SessionType(enum.StrEnum):
    """TPM_SE, the sessionType of a StartAuthSession (Part 2, 6.11). A trial session lives in
    the policy sessions' handle range: only the command says which it is."""

    HMAC = "hmac"
    POLICY = "policy"
    TRIAL = "trial"

    @property
    def label(self) -> str:
        """How a report names a session of this type ("trial session")."""
        return {SessionType.HMAC: "HMAC session"}.get(self, f"{self.value} session")


_TPM_SE = {0x00: SessionType.HMAC, 0x01: SessionType.POLICY, 0x03: SessionType.TRIAL}
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


@dataclass(slots=True)
class SessionUse:
    """What a client's StartAuthSession asked for, and the attributes it used the session with."""

    handle: int
    type: str  # a SessionType's value, or the unknown sessionType byte ("0x05")
    salted: bool
    bound: bool
    symmetric: str
    attrs: int = 0  # union of TPMA_SESSION bytes seen in auth areas

    def to_json(self) -> dict[str, Any]:
        return {"handle": f"0x{self.handle:08x}", "type": self.type, "salted": self.salted, "bound": self.bound,
                "symmetric": self.symmetric, "attrs": self.attrs, "attrs_text": attrs_text(self.attrs)}


def attrs_text(a: int) -> str:
    bits = [(0x01, "continue"), (0x20, "decrypt"), (0x40, "encrypt"), (0x80, "audit")]
    return ",".join(n for b, n in bits if a & b) or "-"


def parse_start_auth_session(cmd: bytes) -> tuple[bool, bool, str, str] | None:
    """(salted, bound, type, symmetric) from a StartAuthSession command's bytes."""
    try:
        tpm_key, bind = _U32.unpack_from(cmd, 10)[0], _U32.unpack_from(cmd, 14)[0]
        off = 18
        off += 2 + _U16.unpack_from(cmd, off)[0]  # nonceCaller
        off += 2 + _U16.unpack_from(cmd, off)[0]  # encryptedSalt
        stype = cmd[off]
        off += 1
        alg = _U16.unpack_from(cmd, off)[0]
        sym = "none"
        if alg != 0x0010:
            bits, mode = _U16.unpack_from(cmd, off + 2)[0], _U16.unpack_from(cmd, off + 4)[0]
            sym = {0x0006: "aes", 0x0026: "sm4", 0x003F: "camellia", 0x000A: "xor"}.get(alg, f"0x{alg:04x}")
            sym += f"-{bits}" + ({0x0043: "-cfb"}.get(mode, "") if alg != 0x000A else "")
    except (struct.error, IndexError):
        return None
    return (tpm_key != TPM_RH_NULL, bind != TPM_RH_NULL,
            str(_TPM_SE[stype]) if stype in _TPM_SE else f"0x{stype:02x}", sym)


def session_type(use: SessionUse | None) -> SessionType | None:
    """The session's type when its StartAuthSession was seen and named a known one."""
    if use is None:
        return None
    try:
        return SessionType(use.type)
    except ValueError:
        return None
