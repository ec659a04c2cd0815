"""The recorder: the transport's sink. Every TPM exchange becomes an :class:`Event` in a
bounded ring buffer, plus one latency histogram per (origin, command code).

It listens and never talks: the transport hands it each :class:`~tpmtop.tpm.exchange.Exchange`
(an append), and decoding happens later, off the timed path (see ``between_jobs``).

Readers (the dashboard, a bench report) may read at any time from another thread; one lock
guards the update of the ring, the histograms and the handle book-keeping together so a
reader never sees a command counted in one and missing from the other.

Origins keep tpmtop's own traffic out of the workload's numbers: ``workload`` (the session
engine's operations), ``poll`` (the dashboard asking the TPM for handles/properties),
``user`` (a command the operator asked for: info, handles, flush).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tpmtop.ring import Ring
from tpmtop.stats import LatencyHistogram
from tpmtop.tpm import names, wire
from tpmtop.tpm.exchange import SEEN_ORIGINS

DEFAULT_CAPACITY = 100_000
# Raw command/response bytes are kept for the newest events only (for a full decode of the
# one someone looks at): a ring of 100,000 events with their buffers held up to ~150 MB,
# depending on how many carried ~1 KB context blobs; this bounds it to ~20 MB.
BUFFERS_KEPT = 16_384
RECENT_PER_COMMAND = 120  # samples kept per command for sparklines
# Failed commands are kept apart from the ring as well: the ring holds a few minutes of a fast
# workload, the error counters count since the start, and `/ errors` must find what they count.
FAILURES_KEPT = 10_000
SHAPES_KEPT = 4_096  # distinct handles/sessions tuples shared among events (Recorder._shared)


class Event(msgspec.Struct, kw_only=True, gc=False):
    """One TPM exchange. Not tracked by the cyclic GC: a ring of 100,000 events (and their
    tuples) made each full collection walk them all, 40-85 ms with every thread stopped, several
    times a minute under an unpaced workload (a key pressed then waited that long). An event
    holds only numbers, strings, bytes and tuples of numbers: it can never be part of a cycle,
    and reference counting frees it. The rings that hold events are :class:`~tpmtop.ring.Ring`
    (tuples the collector untracks), not deques, whose every reference a full collection visits."""

    seq: int
    t_ns: int  # perf_counter_ns() when the command was handed to the transport
    cc: int | None
    handles: tuple[int, ...]
    sessions: tuple[tuple[int, int], ...]  # (session handle, TPMA_SESSION byte)
    cmd_size: int
    rsp_size: int
    rc: int | None  # None: no response (transport failure)
    rsp_handle: int | None
    wire_ns: int  # transmit start to end of receive
    origin: str
    engine: str | None = None
    mode: str | None = None
    op: str | None = None
    op_seq: int | None = None
    garbled: bool = False
    error: str | None = None
    command: bytes | None = None
    response: bytes | None = None
    client: str | None = None  # the proxied program that sent it, when there is one
    # Seen, not sent (the kernel's commands under tpmtop's probes): answered, but its response
    # code could not be read (a user-space command through /dev/tpmrm0). Not a failure.
    rc_unknown: bool = False
    note: str | None = None  # where an observed command came from ("IMA extend", "user tpm2_pcrread")
    expected: bool = False  # a TPM error its sender expects (the kernel's resource manager): no failure

    @property
    def name(self) -> str:
        return names.cc_name(self.cc)

    @property
    def rc_text(self) -> str:
        if self.rc_unknown:
            return "answered (response code not traced)"
        return self.error or names.rc_text(self.rc)


@dataclass(slots=True)
class HandleUse:
    """What the wire told us about one handle."""

    handle: int
    first_seen_ns: int
    last_use_ns: int
    uses: int = 0
    # the TPM returned it to tpmtop's own command (CreatePrimary, StartAuthSession, ContextLoad …),
    # not to a proxied program's or the kernel's
    ours: bool = False
    created_by: str | None = None


@dataclass(slots=True)
class CommandStats:
    hist: LatencyHistogram = field(default_factory=LatencyHistogram)
    errors: int = 0
    last_ns: int = 0
    recent: deque[Any] = field(default_factory=lambda: deque(maxlen=RECENT_PER_COMMAND))


FREE_AFTER_S = 0.25  # long enough for the screen that asked to be drawn first


def free_later(containers: tuple[Any, ...]) -> None:
    """Empty ``containers`` (rings, deques, dicts) on a short-lived thread, FREE_AFTER_S from now and
    one item at a time: each item freed is a step of Python, so the interpreter can hand the
    GIL to another thread between them (one C-level clear of a full ring holds it throughout)."""
    def drain() -> None:
        time.sleep(FREE_AFTER_S)
        for c in containers:
            pop = c.popitem if isinstance(c, dict) else c.pop
            while c:
                pop()

    threading.Thread(target=drain, name="tpmtop-free", daemon=True).start()


class Recorder:
    def __init__(self, capacity: int = DEFAULT_CAPACITY, keep_buffers: bool = True):
        self.capacity = capacity
        self.keep_buffers = keep_buffers
        self.enabled = True
        self._lock = threading.Lock()
        self._events: Ring[Event] = Ring(capacity)
        self._stats: dict[tuple[str, int | None], CommandStats] = {}
        self._handles: dict[int, HandleUse] = {}
        self._seq = 0
        self._op_seq = 0
        self._shapes: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # see _shared
        self._pending: deque[tuple[Any, ...]] = deque()  # Exchange's fields (Exchange._make names them)
        # the transport's hot path: one append, nothing else
        self.put = self._pending.append  # type: ignore[method-assign,assignment]
        self.decoded_on: str | None = None  # the thread that last decoded (tests check it is not a timed one)
        self._buffered: Ring[Event] = Ring()  # the events still holding their raw bytes
        self.started_ns = time.perf_counter_ns()
        self.marks: list[tuple[int, str]] = []  # (t_ns, text): boundaries such as a TPM reset
        self.failures: Ring[Event] = Ring(FAILURES_KEPT)  # failed commands, oldest first

    # -- listening (the transport's sink) ----------------------------------------------------
    # On the round trip the transport only appends an Exchange to ``_pending`` (a deque:
    # atomic under the GIL, no lock). Decoding into Events, histograms and handle
    # book-keeping (~5 µs each) runs between jobs on the TPM's owner thread
    # (``between_jobs``) or when a reader asks: never inside a timed operation.

    def put(self, exchange: tuple[Any, ...]) -> None:  # replaced per instance by deque.append
        self._pending.append(exchange)

    def between_jobs(self) -> None:
        if self._pending:
            with self._lock:
                self._process()

    def _process(self) -> None:  # caller holds the lock
        pending = self._pending
        if not pending:
            return
        keep = self.keep_buffers
        buffered = self._buffered
        decode_command, decode_response = wire.decode_command, wire.decode_response
        pop = pending.popleft
        shared = self._shared
        self.decoded_on = threading.current_thread().name
        while pending:
            t0, wire_ns, cmd, rsp, error, lab = pop()
            info = decode_command(cmd)
            r = decode_response(rsp, info.cc)
            self._seq += 1
            # FlushContext's target is a parameter, not in the handle area: named among the
            # handles all the same, so that a capture (and its replay) says what was flushed
            handles = info.handles if info.flush_handle is None else (*info.handles, info.flush_handle)
            ev = Event(
                seq=self._seq, t_ns=t0, cc=info.cc, handles=shared(handles), sessions=shared(info.sessions),
                cmd_size=info.size, rsp_size=r.size, rc=r.rc, rsp_handle=r.handle, wire_ns=wire_ns,
                origin=lab.origin, engine=lab.engine, mode=lab.mode, op=lab.op, op_seq=lab.op_seq,
                garbled=info.garbled or (r.garbled and rsp is not None), error=error,
                command=cmd if keep else None, response=rsp if keep else None, client=lab.client)
            self._add_locked(ev)
            if keep:
                buffered.append(ev)
                if len(buffered) > BUFFERS_KEPT:
                    old = buffered.popleft()
                    old.command = old.response = None

    def _shared(self, shape: tuple[Any, ...]) -> tuple[Any, ...]:
        """One tuple for each distinct handles or sessions tuple the ring holds (caller holds the
        lock). An event is kept for the ring's lifetime, and a tuple kept that long counts towards
        the collector's next young collection even after it is untracked: 2-3 per extend (the
        PCR, the session and its attributes) were most of what the dashboard kept per event, and
        set the pace of every collection above it. Shared, a workload's few shapes count once.
        Bounded: a workload of ever-new transient handles starts the table over."""
        if not shape:
            return shape  # () is one object already
        kept = self._shapes.get(shape)
        if kept is None:
            if len(self._shapes) >= SHAPES_KEPT:
                self._shapes.clear()
            kept = self._shapes[shape] = shape
        return kept

    def observed(self, t_ns: int, cc: int | None, wire_ns: int, *, origin: str, rc: int | None,
                 answered: bool = True, cmd_size: int = 0, rsp_size: int = 0, client: str | None = None,
                 note: str | None = None, error: str | None = None, expected: bool = False) -> None:
        """A command someone else sent, seen and already decoded (the kernel's own, under
        tpmtop kernel's probes): no bytes, no handles. The same ring and histograms as what
        tpmtop sends, under its own origin, so every panel and export reads it alike.
        ``answered`` with ``rc`` None: a response came, its code was not readable."""
        with self._lock:
            self._process()
            self._seq += 1
            self._add_locked(Event(
                seq=self._seq, t_ns=t_ns, cc=cc, handles=(), sessions=(), cmd_size=cmd_size, rsp_size=rsp_size,
                rc=rc, rsp_handle=None, wire_ns=wire_ns, origin=origin, error=error, client=client,
                rc_unknown=rc is None and answered, note=note, expected=expected))

    def next_op_seq(self) -> int:
        """Operation numbers are unique per recorder, whichever workload runs them."""
        self._op_seq += 1
        return self._op_seq

    def _add_locked(self, ev: Event) -> None:
        now = ev.t_ns + ev.wire_ns
        self._events.append(ev)
        key = (ev.origin, ev.cc)
        st = self._stats.get(key)
        if st is None:
            st = self._stats[key] = CommandStats()
        if ev.rc is None:
            if ev.rc_unknown:  # answered: its latency counts, its outcome is unknown
                st.hist.record(ev.wire_ns)
                st.last_ns = ev.wire_ns
                st.recent.append(ev.wire_ns)
                return
            self._failed_locked(st, ev)
            return
        st.hist.record(ev.wire_ns)
        st.last_ns = ev.wire_ns
        st.recent.append(ev.wire_ns)
        if ev.rc != 0 and not ev.expected:
            self._failed_locked(st, ev)
        self._track_handles(ev, now)

    def _failed_locked(self, st: CommandStats, ev: Event) -> None:
        st.errors += 1
        self.failures.append(ev)

    def _track_handles(self, ev: Event, now: int) -> None:
        flush = ev.cc == wire.CC_FLUSH_CONTEXT
        for h in ev.handles if not flush else ():  # a flush is not a use of what it ends
            self._use(h, now)
        for sh, attrs in ev.sessions:
            if sh == wire.TPM_RS_PW:  # not a handle anyone holds
                continue
            self._use(sh, now)
            # A session used without continueSession is flushed by the TPM on success.
            if ev.rc == 0 and not attrs & 0x01:
                self._handles.pop(sh, None)
        if ev.rc != 0:
            return
        if ev.rsp_handle is not None:
            u = self._use(ev.rsp_handle, now)
            # Assigned, not or-ed: a handle tpmtop flushed may come back as a proxied client's.
            u.ours = ev.origin not in SEEN_ORIGINS and ev.client is None
            u.created_by = names.cc_short(ev.cc)
        if flush and ev.handles:  # the flushed handle, whether or not the bytes were kept
            self._handles.pop(ev.handles[-1], None)

    def _use(self, handle: int, now: int) -> HandleUse:
        u = self._handles.get(handle)
        if u is None:
            u = self._handles[handle] = HandleUse(handle, now, now)
        u.uses += 1
        u.last_use_ns = now
        return u

    def mark(self, text: str) -> None:
        with self._lock:
            self.marks.append((time.perf_counter_ns(), text))

    def failed_events(self) -> list[Event]:
        """Every failed command since the start (or ``r``), up to FAILURES_KEPT, oldest first."""
        with self._lock:
            self._process()
            return list(self.failures)

    def forget_handle(self, handle: int) -> None:
        with self._lock:
            self._process()
            self._handles.pop(handle, None)

    def reset_stats(self) -> None:
        """Drop the latency statistics and events; keep handle ownership (the TPM still holds them).
        Fresh containers replace the old ones, which are freed later on a thread of their own:
        freeing a full ring (100,000 events, their histograms) took ~20 ms of the caller's
        thread, the dashboard's, inside the frame that shows the reset (benchmarks/ui_load.py, r)."""
        with self._lock:
            self._pending.clear()  # not replaced: the transport holds its append (self.put)
            old = (self._buffered, self._events, self._stats, self.failures)
            self._buffered = Ring()
            self._events = Ring(self.capacity)
            self._stats = {}
            self.failures = Ring(FAILURES_KEPT)
            # The stream's clock starts again: a boundary from before would read as a negative time.
            self.marks = []
            self.started_ns = time.perf_counter_ns()
        free_later(old)

    # -- reading (any thread) ---------------------------------------------------------------
    def events(self, last: int | None = None) -> list[Event]:
        with self._lock:
            self._process()
            if last is None or last >= len(self._events):
                return list(self._events)
            return self._events.newest(last)

    def events_since(self, seq: int) -> list[Event]:
        with self._lock:
            self._process()
            out = []
            for ev in reversed(self._events):
                if ev.seq <= seq:
                    break
                out.append(ev)
        out.reverse()
        return out

    @property
    def total(self) -> int:
        return self._seq + len(self._pending)

    def command_stats(self, origin: str | None = "workload") -> dict[int | None, CommandStats]:
        """Per command code; ``origin=None`` merges all origins (a fresh histogram)."""
        with self._lock:
            self._process()
            items = list(self._stats.items())
        if origin is not None:
            return {cc: st for (o, cc), st in items if o == origin}
        merged: dict[int | None, CommandStats] = {}
        for (_, cc), st in items:
            m = merged.setdefault(cc, CommandStats())
            m.hist.merge(st.hist)
            m.errors += st.errors
            m.last_ns = st.last_ns or m.last_ns
        return merged

    def handle_uses(self) -> dict[int, HandleUse]:
        with self._lock:
            self._process()
            return {h: HandleUse(u.handle, u.first_seen_ns, u.last_use_ns, u.uses, u.ours, u.created_by)
                    for h, u in self._handles.items()}

    def owned_handles(self) -> set[int]:
        with self._lock:
            self._process()
            return {h for h, u in self._handles.items() if u.ours}
