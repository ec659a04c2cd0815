"""The EK certificates the manufacturer wrote into NV (TCG EK Credential Profile indices): which
are present, and each one's issuer, subject and validity, parsed with ``cryptography``. Read
with each index's own empty password, only where the index allows it and never counts a failure
(:meth:`tpmtop.tpm.status.NvPublic.readable_unauthorized`)."""

from __future__ import annotations

import datetime
import hashlib

from tpmtop.health.probe import EK_CERT_INDICES, TpmFacts
from tpmtop.health.verdicts import Kind, Level, Verdict, unknown


def _der(data: bytes) -> bytes:
    """The certificate's own DER bytes: NV indices are often larger than the certificate and
    padded (0xFF or 0x00) after it; the outer SEQUENCE's length says where it ends."""
    if len(data) >= 4 and data[0] == 0x30 and data[1] == 0x82:
        return data[:4 + int.from_bytes(data[2:4], "big")]
    if len(data) >= 3 and data[0] == 0x30 and data[1] == 0x81:
        return data[:3 + data[2]]
    return data


def describe(index: int, data: bytes, now: datetime.datetime) -> tuple[str, list[str], dict[str, object], bool]:
    """(one line, evidence, figures, in validity) for one certificate's bytes."""
    from cryptography import x509

    der = _der(data)
    fp = hashlib.sha256(der).hexdigest()
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError as e:
        return (f"0x{index:08x} {EK_CERT_INDICES[index]}: {len(data)} bytes, not a DER certificate "
                f"({e})",
                [], {"index": index, "parsed": False, "sha256": fp}, False)
    nb, na = cert.not_valid_before_utc, cert.not_valid_after_utc
    valid = nb <= now <= na
    issuer = cert.issuer.rfc4514_string()
    subject = cert.subject.rfc4514_string() or "(empty: the EK profile allows it, with a SAN)"
    ev = [f"0x{index:08x} issuer: {issuer}", f"0x{index:08x} subject: {subject}",
          f"0x{index:08x} valid {nb:%Y-%m-%d} to {na:%Y-%m-%d}"
          + ("" if valid else (" — NOT YET VALID" if now < nb else " — EXPIRED")),
          f"0x{index:08x} serial {cert.serial_number:x}, SHA-256 {fp}"]
    data_out: dict[str, object] = {"index": index, "parsed": True, "issuer": issuer,
                                   "subject": cert.subject.rfc4514_string(), "not_before": nb.isoformat(),
                                   "not_after": na.isoformat(), "sha256": fp,
                                   "valid_now": valid}
    return f"{EK_CERT_INDICES[index]} at 0x{index:08x}", ev, data_out, valid


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
    bad = False
    for p in present:
        data = facts.ek_data.get(p.index)
        if data is None:
            why = facts.errors.get(f"0x{p.index:08x}") or "not readable without authorization (no authread/no_da)"
            lines.append(f"0x{p.index:08x} present, not read")
            ev.append(f"0x{p.index:08x} {EK_CERT_INDICES[p.index]}: {p.data_size} bytes, {why}")
            certs.append({"index": p.index, "parsed": False, "read": False})
            continue
        line, e, d, valid = describe(p.index, data, now)
        lines.append(line)
        ev += e or [line]
        certs.append(d)
        bad = bad or not d.get("parsed") or not valid
    text = "; ".join(lines)
    level = Level.WARN if bad else Level.OK
    return Verdict(Kind.EK_CERTS, level, text, tuple(ev), (("certificates", certs),))
