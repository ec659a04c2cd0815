"""What clients left loaded, as the TPM says it after a command that flushes by hierarchy
(TPM2_Clear, ChangeEPS/PPS, HierarchyControl: :data:`.accounting.MAY_FLUSH`). The proxy's
model of who holds what follows the commands it forwards; such a command flushes some of it
and not the rest (a Clear keeps the platform hierarchy's objects and every session), so
instead of guessing, the TPM is asked (GetCapability of its handles) once the command is
answered, and the model keeps only what the TPM still holds (issue 55 item 10).

Over a resource manager (PER_CLIENT) the proxy's own view of handles is its own
connection's, not the clients': nothing is asked there. Layer: proxy; no Textual."""

from __future__ import annotations

from typing import Any

from tpmtop.proxy.lines import LineKind
from tpmtop.proxy.serving import Serving
from tpmtop.proxy.state import ServerState
from tpmtop.tpm import names
from tpmtop.tpm.commands import get_handles
from tpmtop.tpm.exchange import Origin

TRANSIENT_FIRST = 0x80000000
LOADED_SESSION_FIRST = 0x02000000
SAVED_SESSION_FIRST = 0x03000000


def _tpm_holds(transport: Any) -> tuple[set[int], set[int]]:
    """(transient handles, session slots loaded or saved) the TPM lists."""
    transient = set(get_handles(transport, TRANSIENT_FIRST))
    sessions = {h & 0xFFFFFF for first in (LOADED_SESSION_FIRST, SAVED_SESSION_FIRST)
                for h in get_handles(transport, first)}
    return transient, sessions


def after_flush(srv: ServerState) -> None:
    """On the loop, after a MAY_FLUSH command is answered: ask the TPM, drop what it no longer
    holds, and say so in one line naming the command's client."""
    due = srv.accounts.verify_due
    srv.accounts.verify_due = None
    if due is None or srv.serving is Serving.PER_CLIENT or srv.conn is None:
        return
    c, cc = due
    what = f"client {c.id} {c.name} (pid {c.peer.pid}) sent {names.cc_short(cc)}"
    try:
        transient, sessions = srv.conn.call(_tpm_holds, origin=Origin.POLL)
    except Exception as e:  # the TPM failed: the model is kept as it was, and that is said
        srv.log(f"{what}; what it flushed could not be asked of the TPM ({type(e).__name__}: {e})",
                LineKind.FAULT)
        return
    kept, gone = srv.accounts.reconcile(transient, sessions)
    flushed = ", ".join(f"0x{h.handle:08x} {h.label} of client {o.id}" for o, h in gone) or "nothing"
    srv.log(f"{what}: the TPM flushed {flushed} of what clients had loaded, and still holds {kept} "
            "(asked of the TPM)", LineKind.FOREIGN)
