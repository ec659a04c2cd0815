"""The same session strategies through tpm2-pytss ESAPI: what user-space tools pay.

ESAPI keeps its own resource objects (ESYS_TR) for every handle; when the TPM ends a session
(continueSession clear) or a session is context-saved, the ESYS_TR must be closed host-side
(``tr_close``), or ESAPI's list grows without bound.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tpm2_pytss import ESAPI
from tpm2_pytss.constants import ESYS_TR, TPM2_ALG, TPM2_SE
from tpm2_pytss.TSS2_Exception import TSS2_Exception
from tpm2_pytss.types import TPM2B_SENSITIVE_CREATE, TPML_DIGEST_VALUES, TPMT_HA, TPMT_SYM_DEF

from tpmtop.errors import TpmError
from tpmtop.sessions.engine import EXTEND_DIGEST, RANDOM_BYTES, CryptoEngine
from tpmtop.sessions.modes import OP_COMMANDS, Engine, Op
from tpmtop.sessions.templates import null_primary_public
from tpmtop.tpm import names

if TYPE_CHECKING:
    from tpm2_pytss.types import TPMS_CONTEXT

    from tpmtop.tpm.commands import Transacts


@contextmanager
def tpm_errors(what: str) -> Iterator[None]:
    """ESAPI's exceptions as tpmtop's: the same one line, rc and hint as the native engine's,
    so the workload's recovery (session lost, TPM reset) treats both engines alike."""
    try:
        yield
    except TSS2_Exception as e:
        rc = int(e.rc)
        # TPM-layer codes (layer 0) are the TPM's own; others are tpm2-tss's (ESAPI, TCTI …)
        tpm_rc = rc if rc >> 16 == 0 else None
        hint = names.rc_hint(tpm_rc)
        raise TpmError(f"{what} failed: 0x{rc:x} {e}" + (f" — {hint}" if hint else ""), tpm_rc) from None

_SYM = TPMT_SYM_DEF(algorithm=TPM2_ALG.AES)
_SYM.keyBits.aes = 128
_SYM.mode.aes = TPM2_ALG.CFB


def _extend_digests() -> TPML_DIGEST_VALUES:
    ha = TPMT_HA(hashAlg=TPM2_ALG.SHA256)
    ha.digest.sha256 = EXTEND_DIGEST
    return TPML_DIGEST_VALUES([ha])


class EsysSession:
    __slots__ = ("context", "tr")

    def __init__(self, tr: ESYS_TR | None) -> None:
        self.tr = tr
        self.context: TPMS_CONTEXT | None = None


class EsysEngine(CryptoEngine[EsysSession, ESYS_TR]):
    name = Engine.ESYS

    def __init__(self, transport: Transacts, esapi: ESAPI) -> None:
        super().__init__()  # integrity_failures stays 0: ESAPI checks response HMACs itself and raises
        self.t = transport
        self.esys = esapi

    def _create_null(self) -> tuple[bytes, TPMS_CONTEXT]:
        with tpm_errors("CreatePrimary"):
            handle, _, _, _, _ = self.esys.create_primary(TPM2B_SENSITIVE_CREATE(), null_primary_public(),
                                                          primary_handle=ESYS_TR.NULL)
            name = bytes(self.esys.tr_get_name(handle))
            ctx = self.esys.context_save(handle)
            self.esys.flush_context(handle)
        return name, ctx

    def _load_context(self, context: TPMS_CONTEXT) -> ESYS_TR:
        with tpm_errors("ContextLoad"):
            return self.esys.context_load(context)

    def start_session(self, tpm_key: ESYS_TR) -> EsysSession:
        with tpm_errors("StartAuthSession"):
            tr = self.esys.start_auth_session(tpm_key=tpm_key, bind=ESYS_TR.NONE, session_type=TPM2_SE.HMAC,
                                              symmetric=_SYM, auth_hash=TPM2_ALG.SHA256)
        return EsysSession(tr)

    def flush(self, handle: ESYS_TR) -> None:
        with tpm_errors("FlushContext"):
            self.esys.flush_context(handle)

    def save_session(self, s: EsysSession) -> None:
        with tpm_errors("ContextSave"):
            s.context = self.esys.context_save(s.tr)  # ESAPI invalidates the ESYS_TR of a saved session
        s.tr = None

    def load_session(self, s: EsysSession) -> None:
        with tpm_errors("ContextLoad"):
            s.tr = self.esys.context_load(s.context)
        s.context = None

    def forget_session(self, s: EsysSession) -> None:
        if s.tr is not None:
            try:
                self.esys.tr_close(s.tr)
            except Exception:
                pass  # ESAPI already dropped it
            s.tr = None

    def session_handle(self, s: EsysSession) -> ESYS_TR | None:
        return s.tr  # None while context-saved: ESAPI invalidates the ESYS_TR

    def tpm_handle(self, s: EsysSession) -> int | None:
        if s.tr is not None:
            return int(self.esys.tr_get_tpm_handle(s.tr))
        if s.context is not None:
            return int(s.context.savedHandle)
        return None

    def op(self, op: str, session: EsysSession | None, attrs: int, pcr: int) -> None:
        with tpm_errors(OP_COMMANDS[Op(op)]):
            self._op(op, session, attrs, pcr)

    def _op(self, op: str, session: EsysSession | None, attrs: int, pcr: int) -> None:
        e = self.esys
        if session is not None:
            e.trsess_set_attributes(session.tr, attrs, 0xFF)
        if op == Op.EXTEND:
            e.pcr_extend(ESYS_TR.PCR0 + pcr, _extend_digests(),
                         session1=session.tr if session else ESYS_TR.PASSWORD)
        elif op == Op.GET_RANDOM:
            e.get_random(RANDOM_BYTES, session1=session.tr if session else ESYS_TR.NONE)
        elif op == Op.CREATE_PRIMARY:
            handle = e.create_primary(TPM2B_SENSITIVE_CREATE(), null_primary_public(), primary_handle=ESYS_TR.NULL,
                                      session1=session.tr if session else ESYS_TR.PASSWORD)[0]
            e.flush_context(handle)
        else:
            raise ValueError(op)
