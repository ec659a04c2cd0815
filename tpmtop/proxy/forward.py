"""The one place where a proxied client's command meets tpmtop's instrumented transport.

Everything the proxy sends reaches the TPM through :func:`forward`: one job on the TPM's owner
thread (:mod:`tpmtop.tpm.owner`), labelled ``Labels(origin="proxy", client=<id>)``, so a
client's command is queued FIFO with tpmtop's own workload and polls, goes on the wire whole,
and is recorded with its client — never with the workload's engine/mode/op.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any, Protocol

from tpmtop.tpm.exchange import Labels
from tpmtop.tpm.owner import DoneJob, Job

ORIGIN = "proxy"


class TransactsAs(Protocol):
    """A transport that stamps a command with given labels and says its wire time
    (:meth:`tpmtop.tpm.transport.InstrumentedTransport.transact_as`)."""

    def transact_as(self, command: bytes, labels: Labels) -> tuple[bytes, int]: ...


@lru_cache(maxsize=256)  # one Labels per live client, not one per command (~2 µs each)
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


def _job(transport: TransactsAs, command: bytes, then: Callable[[bytes, int], None],
         labels: Labels) -> tuple[bytes, int]:
    rsp, wire_ns = transport.transact_as(command, labels)
    then(rsp, wire_ns)
    return rsp, wire_ns


def forward(conn: Any, client_id: int, command: bytes, then: Callable[[bytes, int], None],
            own: Callable[[], TransactsAs] | None = None,
            upstream: Callable[[Callable[[], Any]], Job] | None = None) -> Job | DoneJob:
    """Send ``command`` byte-exact as one job on the TPM's owner thread; ``then(response,
    wire_ns)`` runs inside that job as soon as the response is in, and answers the client
    from there. The returned future fails with what the transport raised
    (TpmConnectionError).

    ``own``/``upstream``: over a resource manager, the client's own transport (its
    /dev/tpmrm0 descriptor, its tpm2-abrmd connection: opened by ``own()`` at its first
    command) on the proxy's upstream thread (``upstream(job)``, :mod:`.upstream`), off the
    event loop and apart from the owner (a client's upstream failing is not tpmtop's)."""
    labels = labels_for(client_id)
    if own is None or upstream is None:
        # On the calling thread (the proxy's loop) when the owner is idle (no hand-over: +51
        # -> +15 µs per command in benchmarks/proxy.py); queued behind the owner's jobs otherwise.
        # The job stamps its one command itself (transact_as): no labels scope around it.
        job: Job | DoneJob = conn.owner.run_now(_job, conn.transport, command, then, labels)
        return job

    def run() -> tuple[bytes, int]:
        return _job(own(), command, then, labels)

    return upstream(run)
