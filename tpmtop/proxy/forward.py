"""The one place where a proxied client's command meets tpmtop's instrumented transport.

Everything the proxy sends reaches the TPM through :func:`forward`: one job on the TPM's owner
thread (:mod:`tpmtop.tpm.owner`), labelled ``Labels(origin="proxy", client=<id>)``, so a
client's command is queued FIFO with tpmtop's own workload and polls, goes on the wire whole,
and is recorded with its client — never with the workload's engine/mode/op.
"""

from __future__ import annotations

from tpmtop.tpm.exchange import Labels, labelled, wire_log

ORIGIN = "proxy"


def labels_for(client_id: int) -> Labels:
    return Labels(origin=ORIGIN, client=str(client_id))


def client_id_of(client: str | None) -> int | None:
    """The proxy client id an event's ``client`` label names (None: tpmtop's own traffic)."""
    if client is None:
        return None
    try:
        return int(client)
    except ValueError:
        return None


def _exchange(transport, command: bytes) -> tuple[bytes, int]:
    log: list = []
    with wire_log(log):
        rsp = transport.transact(command)
    return rsp, log[-1][1] if log else 0


def forward(conn, client_id: int, command: bytes, transport=None) -> tuple[bytes, int]:
    """Send ``command`` byte-exact, return ``(response, wire_ns)`` as the transport timed it.

    ``transport``: a client's own transport (its own /dev/tpmrm0 descriptor), used on the
    calling thread; by default the connection's, through its owner thread. Raises what the
    transport raises (TpmConnectionError) when the TPM is gone."""
    labels = labels_for(client_id)
    if transport is not None:
        with labelled(labels):
            return _exchange(transport, command)
    return conn.owner.call(_exchange, conn.transport, command, labels=labels)
