"""Where a signal may break into tpmtop, and where it must wait.

``tpmtop`` turns SIGTERM, SIGHUP and SIGINT into :class:`~tpmtop.errors.Interrupted` (a
``KeyboardInterrupt``, so no ``except Exception`` on the way can swallow it) so that every
``finally`` runs: handles flushed, the private swtpm stopped, partial captures written.

Some stretches must not be broken into half-way: an ESAPI call runs tpmtop's transport as a
C callback, and an exception raised there either comes back as "tcti:Catch all" or is lost
("Exception ignored from cffi callback"), leaving ESAPI's state broken. Inside
:func:`held` a signal is noted instead, and raised when the outermost ``held`` ends — one
TPM command later at most (bounded by ``--timeout``). A second signal while the first is
waiting does not wait: it is raised at once.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

from tpmtop.errors import Interrupted

_depth = 0  # held() nesting on the main thread (signal handlers only run there)
_closing = 0  # closing() nesting: no signal breaks in, not even a second one
_pending: str | None = None
# Every Interrupted the handler raised, and the last one's reason. A raise can be swallowed:
# Python ignores (prints "Exception ignored in") an exception from a __del__, a weakref or a
# gc callback, and a signal that lands while one runs is lost with it. A wait that sees the
# count move while it is still waiting knows the signal never reached it (:func:`check_lost`).
raised = 0
_raised_why = ""
# Signals received so far. Two mean "do not wait": clean-up still runs, but closing gives a TPM
# that does not answer a short grace instead of the owner's full time-out (see hurry()).
received = 0
# Set by ignore(): tpmtop has cleaned up and is printing its last line, so a signal is counted
# (it still makes a success exit 130) and never raised - raising out of the very except that was
# ending tpmtop gave a traceback and exit 1 instead of 130 in a stress run. The handler stays
# installed: SIG_IGN would discard a signal, and one sent after "capture written" must be seen.
_ignoring = False

SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def handler(signum: int, frame: FrameType | None) -> None:
    """The signal handler tpmtop's CLI installs (SIGTERM, SIGHUP, SIGINT)."""
    global _pending, received
    received += 1  # counted even when ignoring: a signal after the work makes a success 130
    if _ignoring:
        return
    why = f"stopped by {signal.Signals(signum).name}"
    if _closing or (_depth and _pending is None):
        _pending = _pending or why  # raised once the command in flight is answered
        return
    # Not inside a held stretch — or a second signal while one is already waiting: the user
    # will not wait for a TPM that is slow to answer (at most --timeout), so stop now.
    global raised, _raised_why
    _pending = None
    raised += 1
    _raised_why = why
    raise Interrupted(why)


def hurry() -> bool:
    """True once a second signal came: the user will not wait for a TPM that does not answer."""
    return received >= 2


def check_lost(since: int) -> None:
    """Raise the Interrupted the handler raised after ``since`` (a value of :data:`raised`)
    if the caller is still running: it was swallowed on the way (see :data:`raised`)."""
    if raised != since:
        raise Interrupted(_raised_why)


def _unraisable(hook_args: Any) -> None:
    """An Interrupted swallowed by a finalizer is not a bug to show: the handler counted it
    in :data:`raised`, and a wait re-raises it (:func:`check_lost`). Python's own report of it,
    "Exception ignored in … Traceback", reached a proxy's stderr in a CI run. Anything else a
    finalizer raises is reported as Python reports it."""
    if isinstance(hook_args.exc_value, Interrupted):
        return
    _python_unraisable(hook_args)


_python_unraisable = sys.__unraisablehook__


def install() -> None:
    global _ignoring, _python_unraisable
    _ignoring = False
    for sig in SIGNALS:
        signal.signal(sig, handler)
    if sys.unraisablehook is not _unraisable:
        _python_unraisable = sys.unraisablehook
        sys.unraisablehook = _unraisable


def ignore() -> None:
    """From now on a signal breaks into nothing (tpmtop has cleaned up and is about to exit):
    it is only counted, in :data:`received`, which :func:`exit_status` and :func:`_end` read."""
    global _ignoring
    _ignoring = True


_final: int | None = None  # the status exit_status() decided


def exit_status(status: int) -> int:
    """The status tpmtop exits with, decided last: the signals are blocked from here to the
    end (Python puts back their default action while it shuts down, and a SIGTERM landing then
    killed tpmtop, exit 143, after it had said "capture written"), and one that came after the
    command finished makes a success 130, as documented (see also :func:`end_at_exit`)."""
    global _final, _wakeup
    ignore()  # from here a signal is counted, never raised
    # Python's C-level handler writes each signal's number here at once, on whichever thread
    # the kernel gave it to. A thread started before the block below does not block the
    # signals, and CPython 3.11 may run the Python-level handler for a signal such a thread
    # took only much later (its eval breaker is recomputed on the other thread): the count
    # alone missed it (exit 0 in 52 of 60 runs of a test here), this pipe does not.
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    _wakeup = r
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    if status == 0 and (_late() or received):
        print("tpmtop: interrupted", file=sys.stderr, flush=True)
        status = 130
    _final = status
    return status


_wakeup = -1  # the read end of the pipe exit_status() gave signal.set_wakeup_fd


def _late() -> bool:
    """A signal came after exit_status() began: still pending (blocked on the main thread),
    or taken by another thread (its number is in the wake-up pipe)."""
    if set(signal.sigpending()) & set(SIGNALS):
        return True
    if _wakeup < 0:
        return False
    try:
        got = os.read(_wakeup, 512)
    except BlockingIOError:
        return False
    return any(n in got for n in SIGNALS)


def end_at_exit() -> None:
    """For the program's entry only (not a caller of main() in a process that goes on): the
    process ends right after the other atexit callbacks, with the status exit_status() decided
    — 130 if a signal (blocked meanwhile) came during Python's shut-down — without the
    module teardown after them (~0.1 s), in which a blocked signal would be dropped and the
    exit status say success."""
    atexit.register(_end)  # first registered, last run (atexit runs them in reverse)


def _end() -> None:
    if _final is None:  # main() did not finish (a traceback under --debug): Python ends it
        return
    status = _final
    _flush()
    # Looked at after the flush, so that nothing slow stands between the last look and the
    # exit. A signal can reach tpmtop two ways after exit_status(): pending on the main thread
    # (blocked there), or delivered to another thread that does not block it, whose handler
    # then ran on the main thread and only counted it (ignore()). Both make a success 130.
    if status == 0 and (_late() or received):
        print("tpmtop: interrupted", file=sys.stderr)
        _flush()
        status = 130
    os._exit(status)


def _flush() -> None:
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass


def take_pending() -> str | None:
    """The signal held back, if any (and forget it)."""
    global _pending
    why, _pending = _pending, None
    return why


class _Held:
    """``with held():`` — a class, not @contextmanager: it wraps every TPM command, and a
    generator-based context manager would cost ~1 µs of a 30 µs swtpm round trip."""

    __slots__ = ()

    def __enter__(self) -> None:
        global _depth
        if _get_ident() == _MAIN:
            _depth += 1

    def __exit__(self, *exc: object) -> None:
        global _depth
        if _get_ident() == _MAIN:
            _depth -= 1
            if not _depth and _pending is not None:
                raise Interrupted(take_pending())


_HELD = _Held()
_get_ident = threading.get_ident
_MAIN = threading.main_thread().ident


def held() -> _Held:
    """Run the block whole: a signal arriving inside it is raised when it ends (signal
    handlers only ever run on the main thread; elsewhere this does nothing)."""
    return _HELD


class _Closing:
    """``with closing():`` around opening or closing a TPM connection: every signal waits
    until that is done. Breaking into it (a second Ctrl-C) would leave the owner thread's queue, a join
    (CPython 3.11's Thread.join is not safe against an exception raised inside it: "release
    unlocked lock") or the private swtpm half stopped; closing is bounded anyway (the
    owner's join has a time-out)."""

    __slots__ = ()

    def __enter__(self) -> None:
        global _closing
        if _get_ident() == _MAIN:
            _closing += 1

    def __exit__(self, *exc: object) -> None:
        global _closing
        if _get_ident() == _MAIN:
            _closing -= 1
            if not _closing and not _depth and _pending is not None:
                raise Interrupted(take_pending())


_CLOSING = _Closing()


def closing() -> _Closing:
    return _CLOSING


class _Settling(_Closing):
    """``with settling():`` the last stretch of a command whose outcome is decided: its
    capture being written, its last lines. A signal now (a second Ctrl-C, the SIGHUP of a
    terminal closing after the first) would cut the write and lose the capture, or land in a
    finalizer on the way; so every signal waits, as in :func:`closing`, and when the block ends
    tpmtop ignores them for good (:func:`ignore`) and drops the one that waited, so that
    closing has nothing to raise. The exit status stays the one already decided."""

    __slots__ = ()

    def __exit__(self, *exc: object) -> None:
        ignore()  # first: from here the handler returns at once, so nothing below is cut
        take_pending()
        super().__exit__(*exc)


_SETTLING = _Settling()


def settling() -> _Settling:
    return _SETTLING
