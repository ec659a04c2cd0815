"""The TPM's own state, read without any hierarchy's authorization: ReadClock, GetTestResult,
the NV indices' public areas, and an index's data where the index lets anyone read it with
its own empty password and never counts a failure (TPMA_NV_AUTHREAD and TPMA_NV_NO_DA: the EK
certificates' attributes in the TCG EK Credential Profile).

Raw commands, marshalled by TPM 2.0 Part 2/3 as :mod:`tpmtop.tpm.commands` does: ``tpmtop
health`` must not pay tpm2-pytss's import, and tests compare the answers with tpm2-tools'.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntFlag

from tpmtop.errors import TpmError
from tpmtop.tpm import names
from tpmtop.tpm.commands import Transacts, build, check, get_handles
from tpmtop.tpm.wire import TPM_RS_PW, TPM_ST_SESSIONS

CC_READ_CLOCK = 0x181
CC_GET_TEST_RESULT = 0x17C
CC_NV_READ_PUBLIC = 0x169
CC_NV_READ = 0x14E
NV_FIRST = 0x01000000


class Permanent(IntFlag):
    """TPMA_PERMANENT (Part 2, 8.6): GetCapability(TPM_PT_PERMANENT)."""

    OWNER_AUTH_SET = 1 << 0
    ENDORSEMENT_AUTH_SET = 1 << 1
    LOCKOUT_AUTH_SET = 1 << 2
    DISABLE_CLEAR = 1 << 8
    IN_LOCKOUT = 1 << 9
    TPM_GENERATED_EPS = 1 << 10


class StartupClear(IntFlag):
    """TPMA_STARTUP_CLEAR (Part 2, 8.7): GetCapability(TPM_PT_STARTUP_CLEAR)."""

    PH_ENABLE = 1 << 0
    SH_ENABLE = 1 << 1
    EH_ENABLE = 1 << 2
    PH_ENABLE_NV = 1 << 3
    ORDERLY = 1 << 31


# The names tpm2-tools and Windows' Get-Tpm use, for the report.
PERMANENT_NAMES = {Permanent.OWNER_AUTH_SET: "ownerAuthSet", Permanent.ENDORSEMENT_AUTH_SET: "endorsementAuthSet",
                   Permanent.LOCKOUT_AUTH_SET: "lockoutAuthSet", Permanent.DISABLE_CLEAR: "disableClear",
                   Permanent.IN_LOCKOUT: "inLockout", Permanent.TPM_GENERATED_EPS: "tpmGeneratedEPS"}
STARTUP_CLEAR_NAMES = {StartupClear.PH_ENABLE: "phEnable", StartupClear.SH_ENABLE: "shEnable",
                       StartupClear.EH_ENABLE: "ehEnable", StartupClear.PH_ENABLE_NV: "phEnableNV",
                       StartupClear.ORDERLY: "orderly"}


@dataclass(frozen=True)
class ClockInfo:
    """TPMS_TIME_INFO of ReadClock: ms since the last TPM Reset or Restart (time), and
    TPMS_CLOCK_INFO: ms the TPM has been powered (clock), TPM Resets and Restarts since the last
    Clear, and whether no larger clock was ever reported (safe)."""

    time_ms: int
    clock_ms: int
    reset_count: int
    restart_count: int
    safe: bool


def read_clock(transport: Transacts) -> ClockInfo:
    body = check(transport.transact(build(CC_READ_CLOCK)), CC_READ_CLOCK)
    try:
        t, clock, reset, restart, safe = struct.unpack_from(">QQIIB", body)
    except struct.error:
        raise TpmError(f"ReadClock: malformed response ({len(body)} bytes)", None,
                       names.cc_name(CC_READ_CLOCK)) from None
    return ClockInfo(t, clock, reset, restart, bool(safe))


def get_test_result(transport: Transacts) -> tuple[int, bytes]:
    """(testResult, outData): the self-test's TPM_RC (0 passed, TPM_RC_TESTING still running,
    TPM_RC_NEEDS_TEST not run, TPM_RC_FAILURE failed) and the vendor's data."""
    body = check(transport.transact(build(CC_GET_TEST_RESULT)), CC_GET_TEST_RESULT)
    try:
        (n,) = struct.unpack_from(">H", body)
        out = bytes(body[2:2 + n])
        (rc,) = struct.unpack_from(">I", body, 2 + n)
    except struct.error:
        raise TpmError("GetTestResult: malformed response", None, names.cc_name(CC_GET_TEST_RESULT)) from None
    return rc, out


class NvAttr(IntFlag):
    """TPMA_NV (Part 2, 13.4) bits that are flags; the index type (TPM_NT) is bits 4–7."""

    PPWRITE = 1 << 0
    OWNERWRITE = 1 << 1
    AUTHWRITE = 1 << 2
    POLICYWRITE = 1 << 3
    POLICY_DELETE = 1 << 10
    WRITELOCKED = 1 << 11
    WRITEALL = 1 << 12
    WRITEDEFINE = 1 << 13
    WRITE_STCLEAR = 1 << 14
    GLOBALLOCK = 1 << 15
    PPREAD = 1 << 16
    OWNERREAD = 1 << 17
    AUTHREAD = 1 << 18
    POLICYREAD = 1 << 19
    NO_DA = 1 << 25
    ORDERLY = 1 << 26
    CLEAR_STCLEAR = 1 << 27
    READLOCKED = 1 << 28
    WRITTEN = 1 << 29
    PLATFORMCREATE = 1 << 30
    READ_STCLEAR = 1 << 31


NV_TYPES = {0: "ordinary", 1: "counter", 2: "bits", 4: "extend", 8: "pin-fail", 9: "pin-pass"}


@dataclass(frozen=True)
class NvPublic:
    index: int
    name_alg: int
    attributes: int
    data_size: int
    name: bytes

    @property
    def nv_type(self) -> str:
        return NV_TYPES.get((self.attributes >> 4) & 0xF, f"type {(self.attributes >> 4) & 0xF}")

    @property
    def attr_names(self) -> list[str]:
        return [f.name.lower() for f in NvAttr if f.name and self.attributes & f]

    @property
    def readable_unauthorized(self) -> bool:
        """Readable with the index's own empty password, and a wrong one never counts toward
        a lockout: written, AUTHREAD, NO_DA, not read-locked."""
        a = NvAttr(self.attributes & sum(NvAttr))
        return NvAttr.WRITTEN in a and NvAttr.AUTHREAD in a and NvAttr.NO_DA in a and NvAttr.READLOCKED not in a


def nv_indices(transport: Transacts) -> list[int]:
    return get_handles(transport, NV_FIRST)


def nv_read_public(transport: Transacts, index: int) -> NvPublic:
    body = check(transport.transact(build(CC_NV_READ_PUBLIC, struct.pack(">I", index))), CC_NV_READ_PUBLIC)
    try:
        (n,) = struct.unpack_from(">H", body)
        idx, alg, attrs = struct.unpack_from(">IHI", body, 2)
        (plen,) = struct.unpack_from(">H", body, 12)
        (size,) = struct.unpack_from(">H", body, 14 + plen)
        (nlen,) = struct.unpack_from(">H", body, 2 + n)
        name = bytes(body[4 + n:4 + n + nlen])
    except struct.error:
        raise TpmError(f"NV_ReadPublic 0x{index:08x}: malformed response", None,
                       names.cc_name(CC_NV_READ_PUBLIC)) from None
    return NvPublic(idx, alg, attrs, size, name)


_PW_AUTH = struct.pack(">IIHBH", 9, TPM_RS_PW, 0, 0, 0)  # size, TPM_RS_PW, empty nonce, attrs 0, empty hmac


def nv_read(transport: Transacts, pub: NvPublic, chunk: int = 512) -> bytes:
    """An index's whole data, read with its own empty password; refused (TpmError, nothing
    sent) unless :attr:`NvPublic.readable_unauthorized`: never a password that could count."""
    if not pub.readable_unauthorized:
        raise TpmError(f"0x{pub.index:08x} is not readable without authorization", None, names.cc_name(CC_NV_READ))
    out = bytearray()
    while len(out) < pub.data_size:
        n = min(chunk, pub.data_size - len(out))
        body = (struct.pack(">II", pub.index, pub.index) + _PW_AUTH + struct.pack(">HH", n, len(out)))
        rsp = check(transport.transact(build(CC_NV_READ, body, tag=TPM_ST_SESSIONS)), CC_NV_READ)
        try:
            (got,) = struct.unpack_from(">H", rsp, 4)  # after parameterSize
        except struct.error:
            raise TpmError("NV_Read: malformed response", None, names.cc_name(CC_NV_READ)) from None
        if got == 0:
            break
        out += rsp[6:6 + got]
    return bytes(out)
