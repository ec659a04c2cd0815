"""PolicyPCR in software, and the same on the TPM in a trial session.

TPM 2.0 Part 3, TPM2_PolicyPCR: policyDigest' = H(policyDigest ‖ TPM_CC_PolicyPCR ‖
TPML_PCR_SELECTION ‖ H(the selected PCRs' values, in selection order)); PolicyAuthValue:
policyDigest' = H(policyDigest ‖ TPM_CC_PolicyAuthValue). H is the policy session's hash, the
sealed object's nameAlg. Nothing here unseals or uses an authorization: a trial session has no
authorization and cannot count towards dictionary-attack lockout.
"""

from __future__ import annotations

import hashlib
import os
import struct

from tpmtop.errors import TpmError
from tpmtop.pcrs.eventlog import ALG_IDS
from tpmtop.tpm.commands import Transacts, build, check, flush_context

CC_POLICY_PCR = 0x17F  # TPM2_CC.PolicyPCR
CC_POLICY_AUTH_VALUE = 0x16B  # TPM2_CC.PolicyAuthValue
CC_START_AUTH_SESSION = 0x176  # TPM2_CC.StartAuthSession
CC_POLICY_GET_DIGEST = 0x189  # TPM2_CC.PolicyGetDigest
TPM_RH_NULL = 0x40000007
TPM_SE_TRIAL = 0x03
TPM_ALG_NULL = 0x0010


def selection(bank: str, pcrs: tuple[int, ...]) -> bytes:
    """TPML_PCR_SELECTION of one bank (sizeofSelect 3: PCRs 0–23)."""
    sel = bytearray(3)
    for p in pcrs:
        sel[p // 8] |= 1 << (p % 8)
    return struct.pack(">IHB", 1, ALG_IDS[bank], 3) + bytes(sel)


def policy_pcr(alg: str, bank: str, pcrs: tuple[int, ...], values: dict[int, bytes],
               start: bytes | None = None) -> bytes:
    h = hashlib.new(alg)
    pcr_digest = hashlib.new(alg, b"".join(values[p] for p in pcrs)).digest()
    h.update((start if start is not None else bytes(h.digest_size)) + struct.pack(">I", CC_POLICY_PCR)
             + selection(bank, pcrs) + pcr_digest)
    return h.digest()


def policy_auth_value(alg: str, digest: bytes) -> bytes:
    return hashlib.new(alg, digest + struct.pack(">I", CC_POLICY_AUTH_VALUE)).digest()


def trial_policy_pcr(transport: Transacts, alg: str, bank: str, pcrs: tuple[int, ...]) -> bytes:
    """The TPM's own PolicyPCR digest over its current PCRs: StartAuthSession (trial, unbound,
    unsalted), PolicyPCR with an empty pcrDigest (the TPM hashes its PCRs itself),
    PolicyGetDigest, and the session flushed whatever happens."""
    size = hashlib.new(alg).digest_size
    body = (struct.pack(">II", TPM_RH_NULL, TPM_RH_NULL) + struct.pack(">H", size) + os.urandom(size)
            + struct.pack(">H", 0) + struct.pack(">BHH", TPM_SE_TRIAL, TPM_ALG_NULL, ALG_IDS[alg]))
    rsp = check(transport.transact(build(CC_START_AUTH_SESSION, body)), CC_START_AUTH_SESSION)
    if len(rsp) < 4:
        raise TpmError("StartAuthSession: malformed response", None, "TPM2_CC_StartAuthSession")
    (handle,) = struct.unpack_from(">I", rsp, 0)
    try:
        check(transport.transact(build(CC_POLICY_PCR, struct.pack(">IH", handle, 0) + selection(bank, pcrs))),
              CC_POLICY_PCR)
        got = check(transport.transact(build(CC_POLICY_GET_DIGEST, struct.pack(">I", handle))),
                    CC_POLICY_GET_DIGEST)
        (n,) = struct.unpack_from(">H", got, 0)
        return got[2:2 + n]
    except struct.error:
        raise TpmError("PolicyGetDigest: malformed response", None, "TPM2_CC_PolicyGetDigest") from None
    finally:
        flush_context(transport, handle)
