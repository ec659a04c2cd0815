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

from contextvars import ContextVar
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, NamedTuple, Protocol

from tpmtop.tpm.interrupts import held

_HELD = held()


class Origin(StrEnum):
    """Who sent a command. tpmtop's own: the workload, the dashboard's poller, an operator's
    key; what it only sees: a proxied program, the kernel, an imported trace. ``mark`` is
    no command: a boundary (TPM reset, reconnection) in the stream."""

    WORKLOAD = "workload"
    BASELINE = "baseline"  # the dashboard's interleaved `none` operations (the ratio's baseline)
    POLL = "poll"
    USER = "user"
    PROXY = "proxy"
    KERNEL = "kernel"
    IMPORTED = "imported"
    EXPORTER = "exporter"  # `tpmtop exporter --probe`: its GetCapability reads of the slots
    MARK = "mark"


# Traffic tpmtop only sees (another program's, the kernel's, a trace's): a handle it creates
# is not tpmtop's, whatever tpmtop's process carried it to the TPM.
SEEN_ORIGINS = frozenset({Origin.PROXY, Origin.KERNEL, Origin.IMPORTED})


@dataclass(frozen=True, slots=True)
class Labels:
    """Who sent a command and as part of what. ``origin`` keeps tpmtop's own traffic
    (``poll``, ``user``) out of the workload's numbers."""

    origin: str = Origin.USER
    engine: str | None = None
    mode: str | None = None
    op: str | None = None
    op_seq: int | None = None
    client: str | None = None  # a proxied program, when there is one


USER = Labels()
_LABELS: ContextVar[Labels] = ContextVar("tpmtop_labels", default=USER)
# When set, (command code, wire ns, send time ns) of each exchange is appended: the session
# engine sums an operation's wire time from it, and splits its host time by command (the gap
# before each send). A list per operation, owned by the job that set it.
WireEntry = tuple[int | None, int, int]
_WIRE_LOG: ContextVar[list[WireEntry] | None] = ContextVar("tpmtop_wire_log", default=None)


def current_labels() -> Labels:
    return _LABELS.get()


class _Scope:
    """``with``: ``var`` holds ``value`` inside, its old value after — whatever a signal does.

    A generator context manager sets the variable, then enters ``try``; a signal handler that
    raises between the two (CPython checks for pending signals right after a call returns)
    left the labels set for good: every later command on that thread was stamped with an
    operation's labels (seen under load: after test_signals' SIGALRM draws, a one-off
    GetCapability was counted as "workload"). Here the whole scope is held
    (:func:`tpmtop.tpm.interrupts.held`): on the main thread a signal inside it is raised when
    it ends, after the reset. Elsewhere (the TPM's owner thread, where labels are set in
    production) no signal handler runs and holding costs nothing.
    """

    __slots__ = ("token", "value", "var")

    def __init__(self, var: ContextVar[Any], value: Any) -> None:
        self.var, self.value = var, value

    def __enter__(self) -> Any:
        _HELD.__enter__()  # first: from here on a signal is noted, not raised
        self.token = self.var.set(self.value)
        return self.value

    def __exit__(self, *exc: object) -> None:
        try:
            self.var.reset(self.token)
        finally:
            _HELD.__exit__(*exc)  # raises a signal noted inside the scope, now that it is undone


def labelled(labels: Labels | None = None, **changes: Any) -> _Scope:
    """Stamp every exchange sent in this scope (on this thread/context) with ``labels``
    (or the current labels with ``changes``)."""
    lab = labels if labels is not None else _LABELS.get()
    if changes:
        lab = replace(lab, **changes)
    return _Scope(_LABELS, lab)


def wire_log(log: list[Any]) -> _Scope:
    return _Scope(_WIRE_LOG, log)


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
    only store the exchange (an append), never decode or take a contended lock. It gets a
    plain tuple in :class:`Exchange`'s field order (``Exchange._make(x)`` names the fields):
    building the NamedTuple on every command cost more than the rest of the report.
    ``between_jobs`` is called by the TPM's owner thread when no job is running — the one
    moment work on the exchanges cannot delay a TPM operation. ``enabled`` False makes the
    transport skip building exchanges altogether.
    """

    enabled: bool

    def put(self, exchange: tuple[Any, ...]) -> None: ...

    def between_jobs(self) -> None: ...
