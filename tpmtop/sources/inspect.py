"""What the TPM (and the wire) tell about one handle: the dashboard's inspector (Enter on a
handle). Read-only: ReadPublic for objects and persistent keys; for sessions, which the TPM
does not describe, what tpmtop saw of them on the wire. Facts only: the view-model writes the
inspector's rows (tpmtop.viewmodel.rows.inspect). No Textual here.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tpmtop.errors import TpmError

CC_START_AUTH_SESSION = 0x176


if TYPE_CHECKING:
    from tpmtop.recorder import Recorder


@dataclass(frozen=True)
class PublicFacts:
    """ReadPublic's answer, its algorithms by their TPM names (tpm2-pytss's)."""

    type: str  # TPM_ALG name of the object's type ("RSA"), or its number where it has none
    name: bytes
    name_alg: str
    attributes: str  # TPMA_OBJECT's bit names as tpm2-pytss joins them ("" : none set)
    rsa_bits: int | None = None
    ecc_curve: str | None = None  # TPM_ECC curve name
    keyed_hash: bool = False


@dataclass(frozen=True)
class SessionFacts:
    """What the wire showed of a session (the TPM does not describe sessions)."""

    salt: int | None  # StartAuthSession's tpmKey and bind; None: its start was not seen
    bind: int | None
    last_attrs: int | None = None  # the session attributes of its newest use, and on which command
    last_command: str | None = None  # TPM2_CC name


@dataclass(frozen=True)
class HandleFacts:
    """What the TPM and the wire tell about one handle (the view-model writes the inspector's
    rows of it: tpmtop.viewmodel.rows.inspect)."""

    handle: int
    kind: str  # as the handles table lists it (a tpmtop.tpm.handles.HandleKind's value)
    ours: bool
    created_by: str | None  # who created it, when tpmtop knows (a proxied program's name and pid)
    first_seen_s: float | None = None  # seconds since the wire first showed it; None: never seen
    last_use_s: float | None = None
    uses: int = 0
    public: PublicFacts | None = None  # objects and persistent keys
    read_public_error: str | None = None  # the TPM's refusal, as tpmtop.errors.TpmError says it
    session: SessionFacts | None = None  # sessions


def _alg(v: int) -> str:
    from tpm2_pytss.constants import TPM2_ALG

    try:
        return str(TPM2_ALG.to_string(int(v))).removeprefix("TPM2_ALG.")
    except Exception:
        return f"0x{int(v):04x}"  # a number the library has no name for: its number is its name


def read_public(transport: Any, handle: int) -> PublicFacts:
    """ReadPublic, decoded: type, name, name algorithm, attributes, key parameters."""
    from tpm2_pytss.types import TPM2B_NAME, TPM2B_PUBLIC, TPMA_OBJECT

    from tpmtop.tpm.commands import CC_READ_PUBLIC, build, check

    body = check(transport.transact(build(CC_READ_PUBLIC, struct.pack(">I", handle))), CC_READ_PUBLIC)
    pub, off = TPM2B_PUBLIC.unmarshal(body)
    name, _ = TPM2B_NAME.unmarshal(body[off:])
    area = pub.publicArea
    t = int(area.type)
    facts = PublicFacts(_alg(t), bytes(name.name), _alg(area.nameAlg), str(TPMA_OBJECT(int(area.objectAttributes))))
    try:
        if t == 0x0001:  # RSA
            return replace(facts, rsa_bits=int(area.parameters.rsaDetail.keyBits))
        if t == 0x0023:  # ECC
            from tpm2_pytss.constants import TPM2_ECC

            curve = TPM2_ECC.to_string(int(area.parameters.eccDetail.curveID)).removeprefix("TPM2_ECC.")
            return replace(facts, ecc_curve=str(curve))
        if t == 0x0008:  # KEYEDHASH
            return replace(facts, keyed_hash=True)
    except Exception:
        pass
    return facts


def describe(handle: int, kind: str, ours: bool, transport: Any,
             recorder: Recorder, created_by: str | None = None) -> HandleFacts:
    """What is known of ``handle``. ``transport``: a TPM held for this caller;
    ``created_by``: who created it, when tpmtop knows (a proxied program's name and pid)."""
    top = handle >> 24
    facts = HandleFacts(handle, kind, ours, created_by)
    use = recorder.handle_uses().get(handle)
    if use is not None:
        now = time.perf_counter_ns()
        facts = replace(facts, first_seen_s=(now - use.first_seen_ns) / 1e9, last_use_s=(now - use.last_use_ns) / 1e9,
                        uses=use.uses)
    if top in (0x80, 0x81):
        try:
            return replace(facts, public=read_public(transport, handle))
        except TpmError as e:
            return replace(facts, read_public_error=str(e))
    if top in (0x02, 0x03):
        start = next((ev for ev in reversed(recorder.events()) if ev.cc == CC_START_AUTH_SESSION and ev.rc == 0
                      and ev.rsp_handle == handle), None)
        salt, bind = start.handles[:2] if start is not None and len(start.handles) >= 2 else (None, None)
        session = SessionFacts(salt, bind)
        last = next((ev for ev in reversed(recorder.events()) if any(h == handle for h, _ in ev.sessions)), None)
        if last is not None:
            session = replace(session, last_attrs=next(a for h, a in last.sessions if h == handle),
                              last_command=last.name)
        return replace(facts, session=session)
    return facts
