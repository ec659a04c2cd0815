"""One verdict per token, from the live PCR values: would it unseal now, and if not, which PCR.

The software PolicyPCR digest (:mod:`tpmtop.unlock.policy`) is compared with the digest the
sealed object carries (its public area's authPolicy; systemd's ``tpm2-policy-hash`` where the
blob is absent). A digest says only *that* something differs, not *what*: to name the PCR,
each bound PCR is given a few candidate values — its live value, its reset value, and its
value in a ``--since`` snapshot — and the combination that reproduces the sealed digest names
exactly the PCRs that moved (a PCR extended since enrollment was sealed to its reset value, or
to the snapshot's). Where no combination does, a token bound to one PCR names it; one bound to
several names those that changed since the snapshot as the likely cause, or else all of them
as the possible ones.

Never "would unseal" for a token that needs more than the PCRs: a PIN (the PCRs can still be
judged, and a PCR that differs still means "would not"), a signed policy (PolicyAuthorize: the
PCRs are whatever a signature allows), a pcrlock policy (PolicyAuthorizeNV: an NV index holds it).

"Would unseal" says only that the policy holds: the sealed object can be loaded only under the
primary key of the TPM that made it, and proving that would need the owner hierarchy's
authorization (to create the primary), which tpmtop never uses. So the verdict says that which
TPM made the sealed object is not checked: a token sealed on another machine's TPM, or a
``--sim`` TPM, "would unseal" by its PCRs alone. Except where the token records its SRK
(systemd 254+'s ``tpm2_srk``) and the caller read this TPM's key at that handle (ReadPublic,
no authorization): then the verdict says whether it is the same key, and another key there
makes it "would not".
"""

from __future__ import annotations

import enum
import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any

from tpmtop.pcrs.replay import initial
from tpmtop.unlock import policy
from tpmtop.unlock.tokens import Token, TokenKind

MAX_COMBINATIONS = 4096  # 3 candidates for each of 7 PCRs; more bound PCRs: named as possible causes
# Said with every "would unseal": the one thing the verdict cannot check without authorization.
NOT_CHECKED = "that the sealed object was made by this TPM is not checked"


class Verdict(enum.Enum):
    WOULD_UNSEAL = "would-unseal"
    WOULD_NOT = "would-not"
    CANNOT_JUDGE = "cannot-judge"
    NOT_TPM = "not-tpm"
    UNREADABLE = "unreadable"


@dataclass
class Judgement:
    token: Token
    verdict: Verdict
    reason: str
    differs: list[int] = field(default_factory=list)  # bound PCRs known (or likely) to differ
    software_digest: bytes | None = None
    sealed_digest: bytes | None = None
    trial_digest: bytes | None = None
    moved: dict[int, str] = field(default_factory=dict)  # bound PCR -> what moved since the snapshot

    @property
    def text(self) -> str:
        if self.verdict is Verdict.WOULD_UNSEAL:  # its reason is what was checked, and what was not
            return f"would unseal now ({self.reason})"
        words = {Verdict.WOULD_UNSEAL: "would unseal now", Verdict.WOULD_NOT: "would not",
                 Verdict.CANNOT_JUDGE: "cannot be judged here", Verdict.NOT_TPM: "not a TPM token",
                 Verdict.UNREADABLE: "unreadable, skipped"}[self.verdict]
        return f"{words}: {self.reason}" if self.reason else words

    def to_json(self) -> dict[str, Any]:
        t = self.token
        return {"token": t.token_id, "type": t.type, "kind": t.kind.value, "keyslots": t.keyslots,
                "bank": t.bank, "pcrs": list(t.pcrs), "pin": t.pin, "signed_policy_pcrs": list(t.pubkey_pcrs),
                "signed_policy": t.pubkey is not None, "pcrlock": t.pcrlock, "pcrlock_nv": t.pcrlock_nv,
                "primary_alg": t.primary_alg, "verdict": self.verdict.value, "reason": self.reason,
                "differs": self.differs,
                "software_digest": self.software_digest.hex() if self.software_digest is not None else None,
                "sealed_digest": self.sealed_digest.hex() if self.sealed_digest is not None else None,
                "trial_digest": self.trial_digest.hex() if self.trial_digest is not None else None,
                "moved": {str(k): v for k, v in sorted(self.moved.items())}}


def pcr_words(pcrs: list[int] | tuple[int, ...], bank: str | None) -> str:
    ps = ", ".join(str(p) for p in pcrs)
    return f"PCR{'s' if len(pcrs) != 1 else ''} {ps} ({bank})"


def key_fingerprint(pem: bytes) -> str:
    """SHA-256 of the key as recorded (the DER inside a PEM), the first 16 hex digits."""
    import base64
    import binascii

    body = b"".join(line for line in pem.splitlines() if line and not line.startswith(b"-----"))
    try:
        der = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        der = pem
    return "sha256:" + hashlib.sha256(der).hexdigest()[:16]


def _digest(t: Token, values: dict[int, bytes]) -> bytes:
    d = policy.policy_pcr(t.policy_alg, t.bank or "sha256", t.pcrs, values) if t.pcrs else bytes(
        hashlib.new(t.policy_alg).digest_size)
    return policy.policy_auth_value(t.policy_alg, d) if t.pin else d


def judge(t: Token, live: dict[str, dict[int, bytes]], snapshot: dict[tuple[str, int], bytes] | None = None,
          srk: dict[int, bytes | None] | None = None) -> Judgement:
    """``live``: bank -> PCR -> value as the TPM answered; ``snapshot``: (bank, PCR) -> value
    from a ``tpmtop pcrs --save`` snapshot (or None); ``srk``: persistent handle -> the name of
    the key this TPM holds there (None: none), as ReadPublic answered (or None: not asked)."""
    j = _judge(t, live, snapshot)
    if j.verdict is Verdict.WOULD_UNSEAL and t.srk_name is not None and srk is not None and t.srk_handle in srk:
        _srk_words(j, t, srk[t.srk_handle])
    return j


def _srk_words(j: Judgement, t: Token, here: bytes | None) -> None:
    """The token records its SRK (systemd 254+): say whether this TPM holds that key, in the
    place of "not checked". Another key there: the sealed object cannot load, so "would not"."""
    h = f"0x{t.srk_handle:08x}"
    policy = j.reason.removesuffix(f"; {NOT_CHECKED}")
    if here is None:
        j.reason = f"{policy}; its SRK ({h}) is not on this TPM, so {NOT_CHECKED}"
    elif here == t.srk_name:
        j.reason = f"{policy}; its SRK ({h}) is this TPM's"
    else:
        j.verdict = Verdict.WOULD_NOT
        j.reason = f"{policy}, but its SRK is not this TPM's ({h} holds another key)"


def _judge(t: Token, live: dict[str, dict[int, bytes]], snapshot: dict[tuple[str, int], bytes] | None
           ) -> Judgement:
    if t.kind is TokenKind.OTHER:
        return Judgement(t, Verdict.NOT_TPM, "")
    if t.kind is TokenKind.BROKEN:
        return Judgement(t, Verdict.UNREADABLE, t.problem or "")
    if t.pcrlock:
        nv = f" (NV index 0x{t.pcrlock_nv:08x})" if t.pcrlock_nv is not None else ""
        return Judgement(t, Verdict.CANNOT_JUDGE, f"a pcrlock policy{nv}: the PCRs it allows are held in NV, "
                         "not in the token (systemd-pcrlock judges it)")
    if t.pubkey is not None:
        signed = pcr_words(t.pubkey_pcrs, t.bank) if t.pubkey_pcrs else "the PCRs a signature names"
        also = f"; also bound to {pcr_words(t.pcrs, t.bank)}" if t.pcrs else ""
        return Judgement(t, Verdict.CANNOT_JUDGE, f"signed policy: {signed} by signature of key "
                         f"{key_fingerprint(t.pubkey)}{also}")
    bank = t.bank or "sha256"
    values = live.get(bank)
    if values is None or any(p not in values for p in t.pcrs):
        return Judgement(t, Verdict.CANNOT_JUDGE, f"the TPM has no {bank} bank allocated for {pcr_words(t.pcrs, bank)}")
    sealed = t.auth_policy if t.auth_policy is not None else t.policy_hash
    if sealed is None:
        return Judgement(t, Verdict.CANNOT_JUDGE, "the token records no policy digest")
    if not sealed and not t.pin:  # an empty authPolicy: no policy at all (clevis without pcr_ids)
        return Judgement(t, Verdict.WOULD_UNSEAL, f"no policy, bound to no PCR; {NOT_CHECKED}",
                         sealed_digest=sealed)
    now = _digest(t, values)
    j = Judgement(t, Verdict.WOULD_UNSEAL, "", software_digest=now, sealed_digest=sealed)
    if now == sealed:
        if t.pin:
            j.verdict, j.reason = Verdict.CANNOT_JUDGE, f"a PIN is also needed ({pcr_words(t.pcrs, bank)} as sealed)"
        else:
            j.reason = f"{'its PCR policy holds' if t.pcrs else 'bound to no PCR'}; {NOT_CHECKED}"
        return j
    j.verdict = Verdict.WOULD_NOT
    if not t.pcrs:
        j.reason = "the sealed policy is not the one its fields describe"
        return j
    found = _which(t, values, snapshot)
    if found is not None:
        j.differs = found
        j.reason = f"{pcr_words(found, bank)} differ{'s' if len(found) == 1 else ''}"
        return j
    if len(t.pcrs) == 1:  # the one PCR bound: it is the one that differs
        j.differs = list(t.pcrs)
        j.reason = f"{pcr_words(t.pcrs, bank)} differs"
        return j
    moved = [p for p in t.pcrs if snapshot is not None and (bank, p) in snapshot and snapshot[(bank, p)] != values[p]]
    if moved:
        j.differs = moved
        j.reason = (f"{pcr_words(t.pcrs, bank)} are not the values it was sealed to; changed since the snapshot: "
                    + ", ".join(str(p) for p in moved))
    else:
        j.differs = list(t.pcrs)
        j.reason = (f"{pcr_words(t.pcrs, bank)} are not the values it was sealed to (the token records only "
                    "their digest: any of them could be the cause)")
    return j


def _which(t: Token, values: dict[int, bytes], snapshot: dict[tuple[str, int], bytes] | None) -> list[int] | None:
    """The bound PCRs whose value, swapped for its reset or snapshot value, reproduces the
    sealed digest (the fewest such PCRs), or None."""
    bank = t.bank or "sha256"
    cands: list[list[bytes]] = []
    for p in t.pcrs:
        c = [values[p], initial(bank, p)]
        if snapshot is not None and (bank, p) in snapshot:
            c.append(snapshot[(bank, p)])
        cands.append(list(dict.fromkeys(c)))
    total = 1
    for c in cands:
        total *= len(c)
    if total > MAX_COMBINATIONS:
        return None
    sealed = t.auth_policy if t.auth_policy is not None else t.policy_hash
    best: list[int] | None = None
    for combo in itertools.product(*cands):
        if _digest(t, dict(zip(t.pcrs, combo, strict=True))) == sealed:
            diff = [p for p, v in zip(t.pcrs, combo, strict=True) if v != values[p]]
            if best is None or len(diff) < len(best):
                best = diff
    return best
