"""The EK certificates the manufacturer wrote into NV (TCG EK Credential Profile indices): which
are present, and each one's issuer, subject and validity, parsed with ``cryptography``. Read
with each index's own empty password, only where the index allows it and never counts a failure
(:meth:`tpmtop.tpm.status.NvPublic.readable_unauthorized`).

What is checked is said: a certificate in NV is anyone's bytes until its key is compared with
the TPM's endorsement key. Making the EK (CreatePrimary in the endorsement hierarchy) needs
endorsement authorization, which tpmtop never uses; an EK made persistent at 0x81010001 (RSA) or
0x81010002 (ECC) is read with ReadPublic, no authorization, and compared key for key. A
certificate signed by its own key (or naming itself as issuer) is from no manufacturer's CA."""

from __future__ import annotations

import datetime
import hashlib
from typing import TYPE_CHECKING

from tpmtop.health.probe import EK_CERT_INDICES, EK_PERSISTENT, TpmFacts
from tpmtop.health.verdicts import Kind, Level, Verdict, unknown

if TYPE_CHECKING:
    from cryptography import x509


def _der(data: bytes) -> bytes:
    """The certificate's own DER bytes: NV indices are often larger than the certificate and
    padded (0xFF or 0x00) after it; the outer SEQUENCE's length says where it ends."""
    if len(data) >= 4 and data[0] == 0x30 and data[1] == 0x82:
        return data[:4 + int.from_bytes(data[2:4], "big")]
    if len(data) >= 3 and data[0] == 0x30 and data[1] == 0x81:
        return data[:3 + data[2]]
    return data


def self_signed(cert: x509.Certificate) -> bool:
    """Whether the certificate names itself as issuer or its signature verifies with its own key."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

    if cert.issuer == cert.subject:
        return True
    key, algo = cert.public_key(), cert.signature_hash_algorithm
    try:
        if isinstance(key, rsa.RSAPublicKey) and algo is not None:
            key.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), algo)
        elif isinstance(key, ec.EllipticCurvePublicKey) and algo is not None:
            key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(algo))
        else:
            return False
    except (InvalidSignature, ValueError, TypeError):  # another signer, or another signature scheme
        return False
    return True


def _key_der(cert: x509.Certificate) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_key().public_bytes(serialization.Encoding.DER,
                                          serialization.PublicFormat.SubjectPublicKeyInfo)


def against_ek(cert: x509.Certificate, facts: TpmFacts) -> tuple[str, bool | None]:
    """(what was found, True match / False mismatch / None not compared) against the persistent
    EK of the certificate's key type."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    kind = "RSA" if isinstance(cert.public_key(), rsa.RSAPublicKey) else "ECC"
    handle = next(h for h, k in EK_PERSISTENT.items() if k == kind)
    ek_pub = facts.ek_public.get(handle)
    if ek_pub is None:
        why = facts.errors.get(f"0x{handle:08x}")
        return ("not checked against the TPM's endorsement key ("
                + (f"ReadPublic 0x{handle:08x}: {why}" if why else f"no persistent {kind} EK at 0x{handle:08x}; "
                   "making one needs endorsement authorization, which tpmtop does not use") + ")", None)
    if _key_der(cert) == ek_pub:
        return f"its key matches the TPM's {kind} EK at 0x{handle:08x} (ReadPublic)", True
    return f"its key does NOT match the TPM's {kind} EK at 0x{handle:08x} (ReadPublic)", False


def describe(index: int, data: bytes, now: datetime.datetime,
             facts: TpmFacts | None = None) -> tuple[str, list[str], dict[str, object], Level]:
    """(one line, evidence, figures, level) for one certificate's bytes, compared with the
    persistent EK in *facts* where there is one."""
    from cryptography import x509

    der = _der(data)
    fp = hashlib.sha256(der).hexdigest()
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError as e:
        return (f"0x{index:08x} {EK_CERT_INDICES[index]}: {len(data)} bytes, not a DER certificate "
                f"({e})",
                [], {"index": index, "parsed": False, "sha256": fp}, Level.WARN)
    nb, na = cert.not_valid_before_utc, cert.not_valid_after_utc
    valid = nb <= now <= na
    issuer = cert.issuer.rfc4514_string()
    subject = cert.subject.rfc4514_string() or "(empty: the EK profile allows it, with a SAN)"
    ev = [f"0x{index:08x} issuer: {issuer}", f"0x{index:08x} subject: {subject}",
          f"0x{index:08x} valid {nb:%Y-%m-%d} to {na:%Y-%m-%d}"
          + ("" if valid else (" — NOT YET VALID" if now < nb else " — EXPIRED")),
          f"0x{index:08x} serial {cert.serial_number:x}, SHA-256 {fp}"]
    own = self_signed(cert)
    checked, match = against_ek(cert, facts or TpmFacts({}))
    ev.append(f"0x{index:08x} {checked}")
    data_out: dict[str, object] = {"index": index, "parsed": True, "issuer": issuer,
                                   "subject": cert.subject.rfc4514_string(), "not_before": nb.isoformat(),
                                   "not_after": na.isoformat(), "sha256": fp,
                                   "valid_now": valid, "self_signed": own, "matches_ek": match}
    line = (f"{EK_CERT_INDICES[index]} at 0x{index:08x}: present, issuer {issuer}, subject {subject}, "
            f"valid until {na:%Y-%m-%d}" + ("" if valid else (" (NOT YET VALID)" if now < nb else " (EXPIRED)"))
            + f"; {checked}" + ("; self-signed: not from a manufacturer CA" if own else ""))
    # ok only when the TPM's own key vouches for it; present and unchecked is information
    level = Level.WARN if (not valid or own or match is False) else Level.OK if match else Level.INFO
    return line, ev, data_out, level


def fingerprint(facts: TpmFacts) -> str | None:
    """The first EK certificate's SHA-256: what identifies this TPM across TCTIs and ports."""
    for index in sorted(facts.ek_data):
        return hashlib.sha256(_der(facts.ek_data[index])).hexdigest()
    return None


def verdict(facts: TpmFacts, now: datetime.datetime | None = None) -> Verdict:
    if facts.nv is None:
        return unknown(Kind.EK_CERTS, f"NV indices not listed: {facts.errors.get('nv', '?')}")
    now = now or datetime.datetime.now(datetime.UTC)
    present = [p for p in facts.nv if p.index in EK_CERT_INDICES]
    if not present:
        return Verdict(Kind.EK_CERTS, Level.INFO, "no EK certificate in NV (none of the TCG EK Credential "
                       "Profile's indices is defined: a simulator, or a TPM whose certificate is fetched "
                       "from its manufacturer)", ("source: GetCapability(TPM_CAP_HANDLES, NV), no authorization",),
                       (("certificates", []),))
    lines: list[str] = []
    ev: list[str] = []
    certs: list[dict[str, object]] = []
    level = Level.OK
    for p in present:
        data = facts.ek_data.get(p.index)
        if data is None:
            why = facts.errors.get(f"0x{p.index:08x}") or "not readable without authorization (no authread/no_da)"
            lines.append(f"0x{p.index:08x} present, not read")
            ev.append(f"0x{p.index:08x} {EK_CERT_INDICES[p.index]}: {p.data_size} bytes, {why}")
            certs.append({"index": p.index, "parsed": False, "read": False})
            level = max(level, Level.INFO, key=lambda lv: lv.rank)  # present, nothing checked
            continue
        line, e, d, lv = describe(p.index, data, now, facts)
        lines.append(line)
        ev += e or [line]
        certs.append(d)
        level = max(level, lv, key=lambda lv: lv.rank)
    text = "; ".join(lines)
    return Verdict(Kind.EK_CERTS, level, text, tuple(ev), (("certificates", certs),))
