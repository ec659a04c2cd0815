"""The one place where a proxied client's command meets tpmtop's instrumented transport.

Everything the proxy knows about a client reaches the recorder through :func:`forward`:
the exchange is labelled ``origin="client:<id>"`` (see :func:`client_of_origin`), so the
recorder keeps one latency histogram per client and command code, and captures can say which
client sent each command. When the transport takes immutable per-job labels instead of
mutable attributes, only this module changes.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable

CLIENT_PREFIX = "client:"
_label_lock = threading.Lock()  # the transport's labels are attributes: set them one exchange at a time

# A gate: ``gate(origin)`` is a context manager that gives the transport to one user at a time
# with ``origin`` stamped on it (the dashboard's LiveSource.tpm), so a proxied command can never
# be labelled as tpmtop's workload or poll, nor the reverse.
Gate = Callable[[str], object]


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


@contextmanager
def _locked(transport, origin: str):
    with _label_lock:
        yield transport


def forward(transport, client_id: int, command: bytes, gate: Gate | None = None) -> tuple[bytes, int]:
    """Send ``command`` byte-exact, return ``(response, wire_ns)`` as the transport timed it.

    Raises what the transport raises (TpmConnectionError) when the TPM is gone."""
    acc: list = []
    origin = origin_for(client_id)
    with (gate(origin) if gate is not None else _locked(transport, origin)) as t:
        # a client's command carries no engine/mode/op of tpmtop's workload (a gate sets only origin)
        saved = (t.origin, t.engine, t.mode, t.op, t.op_seq, t.acc)
        t.origin, t.engine, t.mode, t.op, t.op_seq, t.acc = origin, None, None, None, None, acc
        try:
            rsp = t.transact(command)
        finally:
            t.origin, t.engine, t.mode, t.op, t.op_seq, t.acc = saved
    return rsp, acc[-1][1] if acc else 0
