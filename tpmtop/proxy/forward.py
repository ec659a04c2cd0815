"""The one place where a proxied client's command meets tpmtop's instrumented transport.

Everything the proxy sends reaches the TPM through :func:`forward`: one job on the TPM's owner
thread (:mod:`tpmtop.tpm.owner`), labelled ``Labels(origin="proxy", client=<id>)``, so a
client's command is queued FIFO with tpmtop's own workload and polls, goes on the wire whole,
and is recorded with its client — never with the workload's engine/mode/op.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from tpmtop.tpm.commands import Transacts
from tpmtop.tpm.exchange import Labels, labelled, wire_log
from tpmtop.tpm.owner import DoneJob, Job

ORIGIN = "proxy"


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


def _job(transport: Transacts, command: bytes, then: Callable[[bytes, int], None]) -> tuple[bytes, int]:
    log: list[tuple[int | None, int]] = []
    with wire_log(log):
        rsp = transport.transact(command)
    wire_ns = log[-1][1] if log else 0
    then(rsp, wire_ns)
    return rsp, wire_ns


def forward(conn: Any, client_id: int, command: bytes, then: Callable[[bytes, int], None],
            transport: Transacts | None = None) -> Job | DoneJob:
    """Send ``command`` byte-exact as one job on the TPM's owner thread; ``then(response,
    wire_ns)`` runs inside that job as soon as the response is in, and answers the client
    from there. The proxy's connection thread does not wait for the job: the answer leaves
    one thread hand-over after the TPM's (each hand-over costs tens of µs of wake-up and GIL).
    The returned future fails with what the transport raised (TpmConnectionError).

    ``transport``: a client's own transport (its own /dev/tpmrm0 descriptor), run on the
    calling thread instead."""
    labels = labels_for(client_id)
    if transport is None:
        # On the connection thread when the owner is idle (no hand-over: +51 -> +15 µs per
        # command in benchmarks/proxy.py); queued behind the owner's jobs otherwise.
        job: Job | DoneJob = conn.owner.run_now(_job, conn.transport, command, then, labels=labels)
        return job
    fut = Job()
    try:
        with labelled(labels):
            fut.set_result(_job(transport, command, then))
    except Exception as e:
        fut.set_exception(e)
    return fut
