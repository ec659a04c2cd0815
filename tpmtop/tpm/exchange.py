"""What one TPM exchange is, the labels it carries, and who may listen to it.

The transport (:mod:`tpmtop.tpm.transport`) reports; it never decodes, counts or stores.
On the round trip it only builds an :class:`Exchange` and hands it to its sink (an append),
so nothing a listener does can land inside an operation someone is timing. The recorder
(:mod:`tpmtop.recorder`) is one such sink; this module never imports it.

Labels travel with the *job*, not with the transport: a :class:`Labels` is immutable and is
set for a scope with :func:`labelled` (a ``contextvars.ContextVar``, so a poll running on one
thread can never stamp its GetCapability "workload", nor the reverse).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Iterator, NamedTuple, Protocol


@dataclass(frozen=True, slots=True)
class Labels:
    """Who sent a command and as part of what. ``origin`` keeps tpmtop's own traffic
    (``poll``, ``user``) out of the workload's numbers."""

    origin: str = "user"
    engine: str | None = None
    mode: str | None = None
    op: str | None = None
    op_seq: int | None = None
    client: str | None = None  # a proxied program, when there is one


USER = Labels()
_LABELS: ContextVar[Labels] = ContextVar("tpmtop_labels", default=USER)
# When set, (command code, wire ns) of each exchange is appended: the session engine sums an
# operation's wire time from it. A list per operation, owned by the job that set it.
_WIRE_LOG: ContextVar["list | None"] = ContextVar("tpmtop_wire_log", default=None)


def current_labels() -> Labels:
    return _LABELS.get()


@contextmanager
def labelled(labels: Labels | None = None, **changes) -> Iterator[Labels]:
    """Stamp every exchange sent in this scope (on this thread/context) with ``labels``
    (or the current labels with ``changes``)."""
    lab = labels if labels is not None else _LABELS.get()
    if changes:
        lab = replace(lab, **changes)
    token = _LABELS.set(lab)
    try:
        yield lab
    finally:
        _LABELS.reset(token)


@contextmanager
def wire_log(log: list) -> Iterator[list]:
    token = _WIRE_LOG.set(log)
    try:
        yield log
    finally:
        _WIRE_LOG.reset(token)


class Exchange(NamedTuple):
    """One command and its response as they went on the wire. ``response`` is None when the
    transport failed (``error`` says how). Times are ``time.perf_counter_ns()``."""

    t_send_ns: int
    wire_ns: int  # send start to end of receive (and of a profile's hold, when shaped)
    command: bytes
    response: bytes | None
    error: str | None
    labels: Labels

    @property
    def t_recv_ns(self) -> int:
        return self.t_send_ns + self.wire_ns


class ExchangeSink(Protocol):
    """A listener the transport reports to.

    ``put`` is called on the round trip's thread right after the response arrived: it must
    only store the exchange (an append), never decode or take a contended lock.
    ``between_jobs`` is called by the TPM's owner thread when no job is running — the one
    moment work on the exchanges cannot delay a TPM operation. ``enabled`` False makes the
    transport skip building exchanges altogether.
    """

    enabled: bool

    def put(self, exchange: Exchange) -> None: ...

    def between_jobs(self) -> None: ...
