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

from tpm2_pytss.TSS2_Exception import TSS2_Exception

from tpmtop.tpm.interrupts import held


class EsapiOnTransport:
    __slots__ = ("_esapi", "_transport", "__dict__")

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
