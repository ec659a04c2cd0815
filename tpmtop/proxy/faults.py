"""A TPM that fails under the proxy (a part of :class:`~tpmtop.proxy.server.ProxyServer`):
the client is answered, the shared TPM is reconnected (or a private swtpm restarted), and
after a time-out it is gone for good. Layer: proxy; no Textual."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from tpmtop.errors import TpmConnectionError
from tpmtop.proxy.accounting import ClientStats
from tpmtop.proxy.lines import LineKind
from tpmtop.proxy.serving import RECOVER_GIVE_UP_MIN_S, TPM_RC_RETRY, error_response
from tpmtop.proxy.state import ServerState
from tpmtop.tpm.commands import Transacts

if TYPE_CHECKING:
    from tpmtop.proxy.session import ClientConn


class Faults(ServerState):
    """ProxyServer's fault recovery; state lives in ProxyServer.__init__."""

    def _tpm_failed(self, conn: ClientConn, client: ClientStats, e: BaseException, own: bool) -> None:
        """On the loop: a command of ``client`` failed at the TPM (its transport raised)."""
        if own or not isinstance(e, TpmConnectionError):
            self.peer_log("TPM failures",
                          f"client {client.id} {client.name}: the TPM failed ({e}); connection closed", LineKind.FAULT)
            conn.close()
            return
        # The shared upstream is lost (a dead or stalled TPM): this client is answered with a
        # response code, never left hanging, and the proxy tries to get the TPM back.
        conn.answer(error_response(TPM_RC_RETRY))
        self._recover(str(e))

    def _recover(self, why: str) -> None:
        if self.failed or not self._recover_lock.acquire(blocking=False):
            return
        self.recovering = True
        threading.Thread(target=self._recovery, args=(why,), daemon=True, name="proxy-recover").start()

    def _recovery(self, why: str) -> None:
        conn = self.conn
        private = getattr(conn, "sim", None) is not None
        self.log(f"the TPM was lost ({why}); "
                 + ("restarting the private swtpm" if private else "reconnecting")
                 + "; clients are answered TPM_RC_RETRY meanwhile", LineKind.FAULT)
        give_up = max(RECOVER_GIVE_UP_MIN_S, float(getattr(conn, "timeout", RECOVER_GIVE_UP_MIN_S)))
        deadline = time.monotonic() + give_up
        last = why
        try:
            while not self._stop.is_set():
                try:
                    conn.owner.call(conn.reconnect, timeout=give_up + 30)
                    conn.owner.call(_probe, conn.transport, timeout=give_up + 30)
                except Exception as e:
                    last = str(e)
                    conn.owner.lost = None
                    if time.monotonic() >= deadline:
                        self.failed = f"the TPM is gone: {last} (tried again for {give_up:g} s)"
                        self.log(self.failed, LineKind.FAULT)
                        return
                    self._stop.wait(1.0)
                    continue
                if private:
                    # a new swtpm holds nothing: every handle the clients had is gone with the old one
                    self.accounts.tpm_reset()
                self.log("the TPM answers again" + (" (a new private swtpm: every object and session of "
                                                    "the clients is gone)" if private else ""),
                         LineKind.FAULT)
                return
        finally:
            self.recovering = False
            self._recover_lock.release()


def _probe(transport: Transacts) -> None:
    """One harmless command (GetRandom 8) on a reconnected TPM: does it answer?"""
    transport.transact(bytes.fromhex("80010000000c0000017b0008"))
