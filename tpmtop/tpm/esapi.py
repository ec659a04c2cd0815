"""ESAPI on tpmtop's transport, with failures that name their real cause.

When the transport under ESAPI fails (the swtpm died, the TPM stopped answering), tpm2-tss
sees only a TCTI error ("tcti:Catch all") and then refuses every later call with
"esapi:Function called in the wrong order" — which is what a clean-up's FlushContext would
report. Every ESAPI call made through :class:`EsapiOnTransport` checks the backend instead:
if the connection is lost, the backend's own error (``TPM connection lost (…)``, or the
time-out naming the TPM) is raised in place of tpm2-tss's.

A signal (Ctrl-C, SIGTERM) during an ESAPI call is held until the call returns
(:func:`tpmtop.tpm.interrupts.held`): raised inside the transport's C callback it would come
back as "tcti:Catch all", or be lost, and leave ESAPI unusable for the clean-up.
"""

from __future__ import annotations

from typing import Any

from tpm2_pytss.TCTI import PyTCTI
from tpm2_pytss.TSS2_Exception import TSS2_Exception

from tpmtop.errors import TpmConnectionError
from tpmtop.tpm.interrupts import held
from tpmtop.tpm.transport import MAX_RESPONSE, InstrumentedTransport


class TransportTcti(PyTCTI):  # type: ignore[misc]  # tpm2-pytss has no type information
    """The TCTI ESAPI is given: each command goes through *transport*'s ``transact`` (so it
    is recorded and shaped like tpmtop's own). ESAPI calls transmit then receive on the same
    thread; the answer is fetched at transmit and handed over at receive."""

    def __init__(self, transport: InstrumentedTransport) -> None:
        super().__init__(max_size=MAX_RESPONSE, magic=b"TPMTOP\x00\x00")
        self.transport = transport
        self._transact = transport.transact
        self._pending: bytes | None = None

    def do_transmit(self, command: bytes) -> None:
        self._pending = self._transact(bytes(command))

    def do_receive(self, timeout: int) -> bytes:
        rsp, self._pending = self._pending, None
        if rsp is None:
            raise TpmConnectionError("receive without a transmitted command")
        return rsp

    def do_finalize(self) -> None:
        pass  # the connection owns the backend; ESAPI closing must not close it


class EsapiOnTransport:
    __slots__ = ("__dict__", "_esapi", "_transport")

    def __init__(self, esapi: Any, transport: Any) -> None:
        self._esapi = esapi
        self._transport = transport

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._esapi, name)
        if not callable(attr):
            return attr
        transport = self._transport

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                with held():
                    return attr(*args, **kwargs)
            except TSS2_Exception:
                lost = getattr(transport.backend, "lost", None)
                if lost is not None:
                    raise lost from None
                raise

        self.__dict__[name] = call  # looked up once per method
        return call
