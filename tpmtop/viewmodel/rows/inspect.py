"""The handle inspector's rows (Enter on a handle): what the TPM and the wire told of it
(:class:`tpmtop.sources.inspect.HandleFacts`), as (field, value) lines under a title. No
Textual here."""

from __future__ import annotations

from tpmtop.sources.inspect import HandleFacts, PublicFacts, SessionFacts

# TCG "Registry of Reserved TPM 2.0 Handles and Localities": persistent handle ranges.
PERSISTENT_RANGES = ((0x81000000, 0x8100FFFF, "owner (storage keys)"), (0x81010000, 0x8101FFFF, "endorsement"),
                     (0x81800000, 0x81FFFFFF, "platform"), (0x81020000, 0x817FFFFF, "owner"))
RH_NULL = 0x40000007
SESSION_ATTRS = ((0x01, "continueSession"), (0x02, "auditExclusive"), (0x04, "auditReset"), (0x20, "decrypt"),
                 (0x40, "encrypt"), (0x80, "audit"))


def inspect_rows(f: HandleFacts) -> tuple[str, list[tuple[str, str]]]:
    """(title, [(field, value)]) for one handle."""
    top = f.handle >> 24
    rows: list[tuple[str, str]] = [("handle", f"0x{f.handle:08x}"), ("listed as", f.kind),
                                   ("created by", "tpmtop" if f.ours else f.created_by
                                    or "unknown (tpmtop did not see it created: another program or the kernel)")]
    if f.first_seen_s is not None and f.last_use_s is not None:
        rows += [("first seen on the wire", f"{f.first_seen_s:,.1f} s ago"),
                 ("last used", f"{f.last_use_s:,.1f} s ago"), ("uses seen", f"{f.uses:,}")]
    if top in (0x80, 0x81):
        if top == 0x81:
            rows.append(("hierarchy", next((w for lo, hi, w in PERSISTENT_RANGES if lo <= f.handle <= hi), "?")))
        if f.public is not None:
            rows += _public_rows(f.public)
        elif f.read_public_error is not None:
            rows.append(("ReadPublic", f.read_public_error))
        return ("object" if top == 0x80 else "persistent key", rows)
    if top in (0x02, 0x03) and f.session is not None:
        saved = f.kind == "saved-session"
        typ = "unknown (the TPM lists saved sessions in the HMAC range whatever their type)" if saved and not f.ours \
            else "HMAC" if top == 0x02 else "policy"
        rows.append(("session type", typ))
        rows += _session_rows(f.session)
        return ("session", rows)
    return ("handle", rows)


def _public_rows(p: PublicFacts) -> list[tuple[str, str]]:
    rows = [("type", p.type), ("name", p.name.hex()), ("name algorithm", p.name_alg),
            ("attributes", p.attributes or "none")]
    if p.rsa_bits is not None:
        rows.append(("key", f"RSA {p.rsa_bits} bits"))
    elif p.ecc_curve is not None:
        rows.append(("key", f"ECC {p.ecc_curve}"))
    elif p.keyed_hash:
        rows.append(("key", "keyed hash"))
    return rows


def _session_rows(s: SessionFacts) -> list[tuple[str, str]]:
    if s.salt is not None and s.bind is not None:
        rows = [("salted with", "no salt (TPM_RH_NULL)" if s.salt == RH_NULL else f"0x{s.salt:08x}"),
                ("bound to", "nothing (TPM_RH_NULL)" if s.bind == RH_NULL else f"0x{s.bind:08x}")]
    else:
        rows = [("salt, bind", "not seen on the wire (started before tpmtop watched): the TPM does not report them")]
    if s.last_attrs is not None and s.last_command is not None:
        names = ", ".join(n for bit, n in SESSION_ATTRS if s.last_attrs & bit) or "none"
        rows.append(("last attributes",
                     f"0x{s.last_attrs:02x} ({names}) on {s.last_command.removeprefix('TPM2_CC_')}"))
    return rows
