"""Where a signal may break into tpmtop, and where it must wait.

``tpmtop`` turns SIGTERM, SIGHUP and SIGINT into :class:`~tpmtop.errors.Interrupted` (a
``KeyboardInterrupt``, so no ``except Exception`` on the way can swallow it) so that every
``finally`` runs: handles flushed, the private swtpm stopped, partial captures written.

Some stretches must not be broken into half-way: an ESAPI call runs tpmtop's transport as a
C callback, and an exception raised there either comes back as "tcti:Catch all" or is lost
("Exception ignored from cffi callback"), leaving ESAPI's state broken. Inside
:func:`held` a signal is noted instead, and raised when the outermost ``held`` ends — one
TPM command later at most (bounded by ``--timeout``).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

from tpmtop.errors import Interrupted

_depth = 0  # held() nesting on the main thread (signal handlers only run there)
_pending: str | None = None

SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def handler(signum, frame) -> None:
    """The signal handler tpmtop's CLI installs (SIGTERM, SIGHUP, SIGINT)."""
    global _pending
    why = f"stopped by {signal.Signals(signum).name}"
    if _depth:
        _pending = _pending or why
        return
    raise Interrupted(why)


def install() -> None:
    for sig in SIGNALS:
        signal.signal(sig, handler)


def take_pending() -> str | None:
    """The signal held back, if any (and forget it)."""
    global _pending
    why, _pending = _pending, None
    return why


@contextmanager
def held():
    """Run the block whole: a signal arriving inside it is raised when it ends."""
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield  # signals never interrupt other threads
        return
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if not _depth and _pending is not None:
            raise Interrupted(take_pending())
