"""The one thread that talks to the TPM.

Everything tpmtop sends — a workload operation, a dashboard poll, a user's flush, a bench's
clean-up — is a *job* on this thread's queue, run to completion one at a time in the order
submitted (a FIFO, so a workload running flat out cannot starve a poll). A job carries its
:class:`~tpmtop.tpm.exchange.Labels`; nothing mutable on the transport says who is talking.

Why one owner rather than a lock:
- signals (Ctrl-C, SIGTERM, SIGHUP) are delivered to the main thread, which only *waits* for
  jobs: an interrupt can never land between a command and its response, or inside a tpm2-tss
  callback, so the stream is always in step for the clean-up job that follows;
- between two jobs, and only then, the owner lets the transport's sink do its work
  (:meth:`ExchangeSink.between_jobs`): decoding never runs inside a timed operation nor
  competes with one for the GIL;
- Python's cyclic garbage collector is left as Python runs it (no pause around a job: GC
  tuning is no tpmtop's business). A collection can land inside a timed operation; the
  wire time of a command is taken around its send and receive alone, so it shows only in
  the operation's time, as it would in any Python client's.
- a lost TPM is seen here, in one place (:attr:`lost`), by whichever job found it.

The fast path: a job asked for from a thread that is neither the main thread nor the owner
(a proxy connection, a dashboard worker), while no job runs and none waits, runs *on the
asking thread* (:meth:`TpmOwner.call`, :meth:`TpmOwner.run_now`). Every job still runs one
at a time — whoever runs one holds :attr:`TpmOwner._running` — with the same labels and
between-jobs work; what it saves is the hand-over to the owner thread and back (two
thread wake-ups, ~10-20 µs each here, far more on a loaded machine). Signal handlers only
run on the main thread, so the guarantees above hold on the asking thread too; the main
thread still only ever waits.
"""

from __future__ import annotations

import _thread
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from tpmtop.errors import TpmConnectionError
from tpmtop.tpm import interrupts
from tpmtop.tpm.exchange import _LABELS, Labels, labelled

WAIT_SLICE_S = 0.05  # the longest a signal can wait for the main thread to notice it
HURRY_GRACE_S = 0.5  # how long closing still waits for the TPM once a second signal came


class Job:
    """A job's outcome: what :meth:`TpmOwner.submit` returns (the part of
    ``concurrent.futures.Future`` tpmtop uses: ``result``, ``exception``, ``done``,
    ``add_done_callback``).

    Why not a Future: its waiter runs Python code around a ``threading.Condition``
    (``Condition.__enter__``/``__exit__`` are Python functions). A signal handler that raises
    right after the condition's lock is taken there leaves it taken for good, and the owner
    thread, which must take the same lock to start or finish the job, blocks forever: seen as
    a hung clean-up after one SIGALRM draw in test_signals, and it is issue 12's "clean-up
    hangs after one Ctrl-C in 1 of 4 runs". Here the owner only ever *releases* a primitive
    lock (C code, never blocks), and a waiter only acquires it: whatever a signal interrupts
    on the waiting side, the owner cannot be stopped by it.
    """

    __slots__ = ("_callbacks", "_cb_lock", "_done", "_exc", "_finished", "_result")

    def __init__(self) -> None:
        self._done = _thread.allocate_lock()
        self._done.acquire()  # released once, by whoever finishes the job
        self._finished = False
        self._result: Any = None
        self._exc: BaseException | None = None
        self._callbacks: list[Callable[..., Any]] | None = []
        self._cb_lock = _thread.allocate_lock()  # taken only by non-main threads, briefly

    def set_result(self, result: Any) -> None:
        self._result = result
        self._finish()

    def set_exception(self, exc: BaseException) -> None:
        self._exc = exc
        self._finish()

    def _finish(self) -> None:
        self._finished = True
        self._done.release()
        with self._cb_lock:
            callbacks, self._callbacks = self._callbacks, None
        for cb in callbacks or ():
            try:
                cb(self)
            except Exception:  # a listener's bug must not stop the TPM's owner
                pass

    def done(self) -> bool:
        return self._finished

    def _wait(self, timeout: float | None) -> None:
        if self._finished:
            return
        # In slices: a signal that arrives after Python last checked for one but before the
        # thread blocks in the lock's C wait does not interrupt that wait, and its handler
        # would run only when the job ends, which on a silent TPM is never (seen under load:
        # Ctrl-C and SIGTERM both lost, test_second_signal_does_not_wait_for_a_silent_tpm).
        # Each slice returns to Python, where a pending handler runs. A waiter interrupted
        # after acquiring holds a lock nobody else needs: the owner never takes it.
        # A signal raised into something that swallows it (a __del__ run meanwhile) is
        # raised again here, the next slice: the wait is still going, so it never got here.
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0)
        since = interrupts.raised
        while True:
            left = WAIT_SLICE_S if deadline is None else min(WAIT_SLICE_S, deadline - time.monotonic())
            if self._done.acquire(True, max(left, 0)):
                break
            interrupts.check_lost(since)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"the TPM's owner did not finish the job in {timeout:g} s")
        self._done.release()  # for any other waiter

    def result(self, timeout: float | None = None) -> Any:
        self._wait(timeout)
        if self._exc is not None:
            raise self._exc
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._exc

    def add_done_callback(self, fn: Callable[[Job], None]) -> None:
        with self._cb_lock:
            if self._callbacks is not None:
                self._callbacks.append(fn)
                return
        fn(self)


class DoneJob:
    """A job that ran on the asking thread (:meth:`TpmOwner.run_now`): already finished, so
    no lock to wait on. The same reading interface as :class:`Job`."""

    __slots__ = ("_exc", "_result")

    def __init__(self, result: Any = None, exc: BaseException | None = None) -> None:
        self._result, self._exc = result, exc

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> Any:
        if self._exc is not None:
            raise self._exc
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._exc

    def add_done_callback(self, fn: Callable[[DoneJob], None]) -> None:
        fn(self)


_MAIN_IDENT = threading.main_thread().ident
_get_ident = threading.get_ident


class TpmOwner:
    def __init__(self, transport: Any, name: str = "tpm-owner") -> None:
        self.transport = transport
        self._q: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()  # a job, or None: stop
        # Held by whoever runs a job: the owner thread, or an asking thread on the fast path.
        # A primitive lock: the owner thread only ever blocks on it for a job in flight
        # elsewhere, and no signal handler runs on either side (never the main thread).
        self._running = _thread.allocate_lock()
        self._owner_waiting = False  # the owner has a job in hand: the fast path steps aside
        self._here: int | None = None  # the thread running a job on the fast path, if any
        self._closed = False
        self.lost: str | None = None  # why the TPM connection was lost, until a reconnect
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- submitting ------------------------------------------------------------------------
    def submit(self, fn: Callable[..., Any], *args: Any, labels: Labels | None = None, **kwargs: Any) -> Job:
        fut = Job()
        if self._closed:
            fut.set_exception(TpmConnectionError("the TPM connection is closed"))
            return fut
        self._q.put((fut, fn, args, kwargs, labels))
        return fut

    def call(self, fn: Callable[..., Any], *args: Any, labels: Labels | None = None, timeout: float | None = None,
             **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` as one job and return its result (or raise its
        exception). Waiting is interruptible: a signal handler that raises in the main thread
        (Ctrl-C) stops the wait, not the job, which finishes on its own. From a thread other
        than the main one, with the owner idle, the job runs right here (the fast path)."""
        if self.on_owner_thread():
            if labels is None:
                return fn(*args, **kwargs)
            with labelled(labels):
                return fn(*args, **kwargs)
        if self._may_run_here():
            return self._run_here(fn, args, kwargs, labels)
        return self.submit(fn, *args, labels=labels, **kwargs).result(timeout)

    def run_now(self, fn: Callable[..., Any], *args: Any, labels: Labels | None = None,
                **kwargs: Any) -> Job | DoneJob:
        """:meth:`submit`, or — from a thread other than the main one, with no job running or
        waiting — run it on this thread at once and return it finished. For a caller that
        would otherwise only wait (a proxy connection answering its client from the job)."""
        if self._may_run_here():
            try:
                return DoneJob(self._run_here(fn, args, kwargs, labels))
            except Exception as e:
                return DoneJob(exc=e)
        return self.submit(fn, *args, labels=labels, **kwargs)

    def on_owner_thread(self) -> bool:
        """True inside a job: on the owner thread, or on a thread running one on the fast path
        (a job that asks for another runs it in place, as the owner thread always did)."""
        return threading.current_thread() is self._thread or self._here == _get_ident()

    def _may_run_here(self) -> bool:
        """Not on the main thread (signals), nothing queued or in hand (FIFO), not closed;
        and then the run lock itself, taken without waiting."""
        return (_get_ident() != _MAIN_IDENT and not self._closed and not self._owner_waiting
                and self._q.empty() and self._running.acquire(False))

    def _run_here(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                  labels: Labels | None) -> Any:
        """One job on the asking thread; the caller took ``_running``."""
        self._here = _get_ident()
        try:
            if self._closed:  # closed after the check: as submit would say
                raise TpmConnectionError("the TPM connection is closed")
            try:
                if labels is None or labels is _LABELS.get():
                    return fn(*args, **kwargs)
                with labelled(labels):
                    return fn(*args, **kwargs)
            except TpmConnectionError as e:
                self.lost = str(e)
                raise
            finally:
                if self._q.empty():
                    self._between_jobs()
        finally:
            self._here = None
            self._running.release()

    @property
    def busy(self) -> bool:
        return self._running.locked() or not self._q.empty()

    # -- the thread ------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            item = self._q.get()
            self._owner_waiting = True
            self._running.acquire()  # a job on the fast path finishes first
            self._owner_waiting = False
            if item is None:
                return  # keeps _running: nothing runs after close, here or elsewhere
            fut, fn, args, kwargs, labels = item
            exc: BaseException | None
            try:
                if labels is None or labels is _LABELS.get():
                    result = fn(*args, **kwargs)
                else:
                    with labelled(labels):
                        result = fn(*args, **kwargs)
            except BaseException as e:  # handed to the waiter, who decides
                if isinstance(e, TpmConnectionError):
                    self.lost = str(e)
                exc, result = e, None
            else:
                exc = None
            if exc is None:
                fut.set_result(result)
            else:
                fut.set_exception(exc)
                del exc
            del fut, fn, args, kwargs, labels, item, result
            if self._q.empty():
                self._between_jobs()
            self._running.release()

    def _between_jobs(self) -> None:
        sink = getattr(self.transport, "sink", None)
        if sink is None:
            return
        try:
            sink.between_jobs()
        except Exception:  # a listener's bug must not stop the TPM's owner
            pass

    def close(self, timeout: float | None = 10.0) -> bool:
        """No new jobs; the queued ones finish first. True if the thread ended in time."""
        if not self._closed:
            self._closed = True
            self._q.put(None)
        if self.on_owner_thread():
            return False
        # Joined in slices: after a second signal a job stuck on a silent TPM gets HURRY_GRACE_S,
        # not the whole time-out (a healthy TPM's queued flushes take milliseconds and finish).
        now = time.monotonic()
        deadline = None if timeout is None else now + timeout
        while self._thread.is_alive():
            now = time.monotonic()
            if interrupts.hurry():
                deadline = min(deadline or now + HURRY_GRACE_S, now + HURRY_GRACE_S)
            if deadline is not None and now >= deadline:
                break
            self._thread.join(WAIT_SLICE_S if deadline is None else min(WAIT_SLICE_S, deadline - now))
        return not self._thread.is_alive()
