"""How the proxy serves: the ways clients share the TPM, and the bounds of what a client may
hold (connections, idle time, turns). Every part of :class:`~tpmtop.proxy.server.ProxyServer`
reads them from here. Layer: proxy; no Textual."""

from __future__ import annotations

import enum
import struct

REAP_INTERVAL_S = 0.25  # the fallback departure check (where pidfds are not available), and log summaries
MAX_CONNECTIONS = 1024  # open client connections (each a socket in the event loop, .loop)
IDLE_TIMEOUT_S = 600.0  # a connection that sends nothing this long is closed
# A raw TPM's turn passes on after its holder was idle this long while others wait (turns.py).
# Generous: a departure is seen at once (pidfd), so this only matters for a client that stays
# alive between commands — and a tool descheduled for a moment on a loaded machine must not
# lose its turn in the middle of its work (0.25 s did: 1 worker in 8 failed with 0x902).
TURN_IDLE_S = 2.0
# "client N connected" / "left" lines said at once per second; more are counted in a summary
CLIENT_LINES_PER_S = 20
RECOVER_GIVE_UP_MIN_S = 5.0  # a TPM unreachable for max(this, --timeout) seconds is gone
TPM_RC_RETRY = 0x922  # the TPM is busy: try again (tpm2-tss's ESAPI retries by itself)
TPM_RC_FAILURE = 0x101  # the TPM is in failure mode (here: it is gone)


class Serving(enum.Enum):
    """How clients share the TPM behind the proxy."""

    PER_CLIENT = "per-client"  # a resource-managed TPM: one upstream connection per client
    TURNS = "turns"  # a raw TPM: one client at a time, the others queue
    INTERLEAVE = "interleave"  # a raw TPM shared command by command (--interleave)


def error_response(rc: int) -> bytes:
    """A TPM response carrying only ``rc`` (what the proxy answers for a TPM it cannot reach)."""
    return struct.pack(">HII", 0x8001, 10, rc)
