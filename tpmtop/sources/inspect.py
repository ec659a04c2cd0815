"""What the TPM (and the wire) tell about one handle: the dashboard's inspector (Enter on a
handle). Read-only: ReadPublic for objects and persistent keys; for sessions, which the TPM
does not describe, what tpmtop saw of them on the wire. No Textual here.
"""

from __future__ import annotations

import struct
import time
from typing import TYPE_CHECKING, Any

from tpmtop.errors import TpmError

# TCG "Registry of Reserved TPM 2.0 Handles and Localities": persistent handle ranges.
PERSISTENT_RANGES = ((0x81000000, 0x8100FFFF, "owner (storage keys)"), (0x81010000, 0x8101FFFF, "endorsement"),
                     (0x81800000, 0x81FFFFFF, "platform"), (0x81020000, 0x817FFFFF, "owner"))
CC_START_AUTH_SESSION = 0x176


if TYPE_CHECKING:
    from tpmtop.recorder import Recorder


def _alg(v: int) -> str:
    from tpm2_pytss.constants import TPM2_ALG

    try:
        return str(TPM2_ALG.to_string(int(v))).removeprefix("TPM2_ALG.")
    except Exception:
        return f"0x{int(v):04x}"


def read_public(transport: Any, handle: int) -> list[tuple[str, str]]:
    """ReadPublic, decoded: type, name, name algorithm, attributes, key parameters."""
    from tpm2_pytss.types import TPM2B_NAME, TPM2B_PUBLIC, TPMA_OBJECT

    from tpmtop.tpm.commands import CC_READ_PUBLIC, build, check

    body = check(transport.transact(build(CC_READ_PUBLIC, struct.pack(">I", handle))), CC_READ_PUBLIC)
    pub, off = TPM2B_PUBLIC.unmarshal(body)
    name, _ = TPM2B_NAME.unmarshal(body[off:])
    area = pub.publicArea
    t = int(area.type)
    out = [("type", _alg(t)), ("name", bytes(name.name).hex()), ("name algorithm", _alg(area.nameAlg)),
           ("attributes", str(TPMA_OBJECT(int(area.objectAttributes))) or "none")]
    try:
        if t == 0x0001:  # RSA
            out.append(("key", f"RSA {int(area.parameters.rsaDetail.keyBits)} bits"))
        elif t == 0x0023:  # ECC
            from tpm2_pytss.constants import TPM2_ECC

            curve = TPM2_ECC.to_string(int(area.parameters.eccDetail.curveID)).removeprefix("TPM2_ECC.")
            out.append(("key", f"ECC {curve}"))
        elif t == 0x0008:  # KEYEDHASH
            out.append(("key", "keyed hash"))
    except Exception:
        pass
    return out


def describe(handle: int, kind: str, ours: bool, transport: Any,
             recorder: Recorder, created_by: str | None = None) -> tuple[str, list[tuple[str, str]]]:
    """(title, [(field, value)]) for ``handle``. ``transport``: a TPM held for this caller;
    ``created_by``: who created it, when tpmtop knows (a proxied program's name and pid)."""
    top = handle >> 24
    rows: list[tuple[str, str]] = [("handle", f"0x{handle:08x}"), ("listed as", kind),
                                   ("created by", "tpmtop" if ours else created_by
                                    or "unknown (tpmtop did not see it created: another program or the kernel)")]
    use = recorder.handle_uses().get(handle)
    if use is not None:
        now = time.perf_counter_ns()
        rows += [("first seen on the wire", f"{(now - use.first_seen_ns) / 1e9:,.1f} s ago"),
                 ("last used", f"{(now - use.last_use_ns) / 1e9:,.1f} s ago"), ("uses seen", f"{use.uses:,}")]
    if top in (0x80, 0x81):
        if top == 0x81:
            rows.append(("hierarchy", next((w for lo, hi, w in PERSISTENT_RANGES if lo <= handle <= hi), "?")))
        try:
            rows += read_public(transport, handle)
        except TpmError as e:
            rows.append(("ReadPublic", str(e)))
        return ("object" if top == 0x80 else "persistent key", rows)
    if top in (0x02, 0x03):
        saved = kind == "saved-session"
        typ = "unknown (the TPM lists saved sessions in the HMAC range whatever their type)" if saved and not ours \
            else "HMAC" if top == 0x02 else "policy"
        rows.append(("session type", typ))
        start = next((ev for ev in reversed(recorder.events()) if ev.cc == CC_START_AUTH_SESSION and ev.rc == 0
                      and ev.rsp_handle == handle), None)
        if start is not None and len(start.handles) >= 2:
            salt, bind = start.handles[:2]
            rows += [("salted with", "no salt (TPM_RH_NULL)" if salt == 0x40000007 else f"0x{salt:08x}"),
                     ("bound to", "nothing (TPM_RH_NULL)" if bind == 0x40000007 else f"0x{bind:08x}")]
        else:
            rows.append(("salt, bind",
                         "not seen on the wire (started before tpmtop watched): the TPM does not report them"))
        last = next((ev for ev in reversed(recorder.events()) if any(h == handle for h, _ in ev.sessions)), None)
        if last is not None:
            attrs = next(a for h, a in last.sessions if h == handle)
            rows.append(("last attributes",
                         f"0x{attrs:02x} ({_session_attrs(attrs)}) on {last.name.removeprefix('TPM2_CC_')}"))
        return ("session", rows)
    return ("handle", rows)


def _session_attrs(a: int) -> str:
    names = ((0x01, "continueSession"), (0x02, "auditExclusive"), (0x04, "auditReset"), (0x20, "decrypt"),
             (0x40, "encrypt"), (0x80, "audit"))
    return ", ".join(n for bit, n in names if a & bit) or "none"
