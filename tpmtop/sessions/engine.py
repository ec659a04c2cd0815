"""What the session strategies need from a crypto engine, and what both engines share.

``tpmtop/sessions/workload.py`` drives an engine (:class:`CryptoEngine`) only through this interface, so the four
strategies are written once and never branch on which engine runs them. The kernel's null
primary handling (probe, reload, name check) lives here once; an engine supplies the TPM
commands (``_create_null``, ``_load_context``) in its own way.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

from tpmtop.errors import NullNameChanged, TpmError
from tpmtop.tpm import names

# Session attribute bits a strategy asks an engine for (TPMA_SESSION). Spelled here (spec
# Part 2), not taken from tpm2_pytss.constants: the dashboard's workload loads this module, and
# tpm2-pytss (with the cryptography it imports) is ~10,000 objects the cyclic GC walks on every
# full collection. tests/tpm/test_transport.py pins each to its name there.
ATTR_CONTINUE = 0x01  # TPMA_SESSION.CONTINUESESSION
ATTR_DECRYPT = 0x20  # TPMA_SESSION.DECRYPT: the command's first TPM2B parameter is encrypted
ATTR_ENCRYPT = 0x40  # TPMA_SESSION.ENCRYPT: the response's first TPM2B parameter is encrypted

# What an operation sends, the same through either engine.
EXTEND_DIGEST = bytes.fromhex("6d3c1f5e3ad2b2f0c0ffee0ddba11ad5e1ec7ed1ab1e5eed0fbadc0ffee15600")
RANDOM_BYTES = 32
# ContextLoad failures that mean "this context is from another TPM life".
CONTEXT_INVALID = frozenset((names.RC_INTEGRITY, names.RC_HIERARCHY, names.RC_HANDLE, names.RC_VALUE))


class SavableSession(Protocol):
    """What the base needs of an engine's session: its saved context (None while loaded)."""

    @property
    def context(self) -> object: ...


SessionT = TypeVar("SessionT", bound=SavableSession)  # the engine's session object
HandleT = TypeVar("HandleT")  # how the engine names a TPM object: a handle (native), an ESYS_TR (esys)


class CryptoEngine(Generic[SessionT, HandleT]):
    """Base of :class:`~tpmtop.sessions.native.NativeEngine` and
    :class:`~tpmtop.sessions.esys.EsysEngine`."""

    name: StrEnum

    def __init__(self) -> None:
        self.null_context: Any = None  # the null primary's saved context (the kernel's tpm2_load_null)
        self.null_name: bytes | None = None
        self.integrity_failures = 0

    # -- what an engine implements -------------------------------------------------------------
    def _create_null(self) -> tuple[bytes, Any]:
        """CreatePrimary in the null hierarchy, ContextSave, FlushContext: (name, context)."""
        raise NotImplementedError

    def _load_context(self, context: Any) -> HandleT:
        """ContextLoad; returns the engine's handle for what was loaded."""
        raise NotImplementedError

    def start_session(self, tpm_key: HandleT) -> SessionT: raise NotImplementedError
    def flush(self, handle: HandleT) -> None: raise NotImplementedError
    def save_session(self, s: SessionT) -> None: raise NotImplementedError
    def load_session(self, s: SessionT) -> None: raise NotImplementedError
    def forget_session(self, s: SessionT) -> None: raise NotImplementedError
    def session_handle(self, s: SessionT) -> HandleT: raise NotImplementedError
    def tpm_handle(self, s: SessionT) -> int | None:
        """The handle the TPM knows the session by (as GetCapability lists it)."""
        raise NotImplementedError
    def op(self, op: str, session: SessionT | None, attrs: int, pcr: int) -> None: raise NotImplementedError

    # -- the kernel's null primary, once for both engines -----------------------------------------
    def create_null_primary(self) -> None:
        name, ctx = self._create_null()
        if self.null_name is not None and name != self.null_name:
            raise NullNameChanged("the null primary's name has changed (TPM reset or interference); "
                                  "stopping as the kernel does")
        self.null_name, self.null_context = name, ctx

    def load_null(self) -> HandleT:
        try:
            return self._load_context(self.null_context)
        except TpmError as e:
            if e.rc is None or names.rc_base(e.rc) not in CONTEXT_INVALID:
                raise
            # A reset TPM has a new null seed: the saved context no longer loads. Re-create
            # and compare names, as the kernel does (tpm2_load_null).
            self.create_null_primary()  # raises NullNameChanged when the name changed
            return self._load_context(self.null_context)

    def end_session(self, s: SessionT) -> None:
        """Flush a session tpmtop started, loaded or context-saved, and drop it host-side."""
        try:
            if s.context is not None and self.session_handle(s) is None:
                self.load_session(s)  # a saved session ESAPI no longer has a handle for
            self.flush(self.session_handle(s))
        finally:
            self.forget_session(s)
