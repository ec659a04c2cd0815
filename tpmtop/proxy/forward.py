"""The one place where a proxied client's command meets tpmtop's instrumented transport.

Everything the proxy knows about a client reaches the recorder through :func:`forward`:
the exchange is labelled ``origin="client:<id>"`` (see :func:`client_of_origin`), so the
recorder keeps one latency histogram per client and command code, and captures can say which
client sent each command. When the transport takes immutable per-job labels instead of
mutable attributes, only this function changes.
"""

from __future__ import annotations

import threading

CLIENT_PREFIX = "client:"
_label_lock = threading.Lock()  # the transport's labels are attributes: set them one exchange at a time


def origin_for(client_id: int) -> str:
    return f"{CLIENT_PREFIX}{client_id}"


def client_of_origin(origin: str | None) -> int | None:
    """The client id an event's origin names, or None for tpmtop's own traffic."""
    if origin and origin.startswith(CLIENT_PREFIX):
        try:
            return int(origin[len(CLIENT_PREFIX):])
        except ValueError:
            return None
    return None


def forward(transport, client_id: int, command: bytes) -> tuple[bytes, int]:
    """Send ``command`` byte-exact, return ``(response, wire_ns)`` as the transport timed it.

    Raises what the transport raises (TpmConnectionError) when the TPM is gone."""
    acc: list = []
    with _label_lock:
        saved = (transport.origin, transport.engine, transport.mode, transport.op, transport.op_seq, transport.acc)
        transport.origin, transport.engine, transport.mode, transport.op, transport.op_seq = \
            origin_for(client_id), None, None, None, None
        transport.acc = acc
        try:
            rsp = transport.transact(command)
        finally:
            (transport.origin, transport.engine, transport.mode, transport.op, transport.op_seq,
             transport.acc) = saved
    return rsp, acc[-1][1] if acc else 0
