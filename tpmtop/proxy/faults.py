"""A TPM that fails under the proxy (a part of :class:`~tpmtop.proxy.server.ProxyServer`):
the client is answered, the shared TPM is reconnected (or a private swtpm restarted), and
after a time-out it is gone for good. Layer: proxy; no Textual."""

from __future__ import annotations

import threading
import time
from typing import Protocol

from tpmtop.errors import TpmConnectionError
from tpmtop.proxy.accounting import ClientStats
from tpmtop.proxy.lines import LineKind
from tpmtop.proxy.serving import RECOVER_GIVE_UP_MIN_S, TPM_RC_RETRY, error_response
from tpmtop.proxy.state import ServerState
from tpmtop.tpm.commands import Transacts


class Answerable(Protocol):
    """A client's connection, as a failure answers it (:class:`.session.ClientConn`)."""

    def answer(self, rsp: bytes) -> None: ...

    def close(self) -> None: ...


class Faults:
    """ProxyServer's fault recovery, over the server's state."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    def tpm_failed(self, conn: Answerable, client: ClientStats, e: BaseException, own: bool) -> None:
        """On the loop: a command of ``client`` failed at the TPM (its transport raised)."""
        if own or not isinstance(e, TpmConnectionError):
            self.state.peer_log("TPM failures",
                          f"client {client.id} {client.name}: the TPM failed ({e}); connection closed", LineKind.FAULT)
            conn.close()
            return
        # The shared upstream is lost (a dead or stalled TPM): this client is answered with a
        # response code, never left hanging, and the proxy tries to get the TPM back.
        conn.answer(error_response(TPM_RC_RETRY))
        self._recover(str(e))

    def _recover(self, why: str) -> None:
        if self.state.failed or not self.state.recover_lock.acquire(blocking=False):
            return
        self.state.recovering = True
        threading.Thread(target=self._recovery, args=(why,), daemon=True, name="proxy-recover").start()

    def _recovery(self, why: str) -> None:
        conn = self.state.conn
        private = getattr(conn, "sim", None) is not None
        self.state.log(f"the TPM was lost ({why}); "
                 + ("restarting the private swtpm" if private else "reconnecting")
                 + "; clients are answered TPM_RC_RETRY meanwhile", LineKind.FAULT)
        give_up = max(RECOVER_GIVE_UP_MIN_S, float(getattr(conn, "timeout", RECOVER_GIVE_UP_MIN_S)))
        deadline = time.monotonic() + give_up
        last = why
        try:
            while not self.state.stopping.is_set():
                try:
                    conn.owner.call(conn.reconnect, timeout=give_up + 30)
                    conn.owner.call(_probe, conn.transport, timeout=give_up + 30)
                except Exception as e:
                    last = str(e)
                    conn.owner.lost = None
                    if time.monotonic() >= deadline:
                        self.state.failed = f"the TPM is gone: {last} (tried again for {give_up:g} s)"
                        self.state.log(self.state.failed, LineKind.FAULT)
                        return
                    self.state.stopping.wait(1.0)
                    continue
                if private:
                    # a new swtpm holds nothing: every handle the clients had is gone with the old one
                    self.state.accounts.tpm_reset()
                self.state.log("the TPM answers again" + (" (a new private swtpm: every object and session of "
                                                    "the clients is gone)" if private else ""),
                         LineKind.FAULT)
                return
        finally:
            self.state.recovering = False
            self.state.recover_lock.release()


def _probe(transport: Transacts) -> None:
    """One harmless command (GetRandom 8) on a reconnected TPM: does it answer?"""
    transport.transact(bytes.fromhex("80010000000c0000017b0008"))
