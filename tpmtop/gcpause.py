"""The cyclic garbage collector, paused by several holders at once.

Three places keep the collector off for a while: the TPM's owner thread around each job (a
collection inside a timed round trip would be timed as the TPM's), the export worker (a
capture is a few hundred thousand new objects, none in a cycle) and the dashboard from a key
to the screen that draws it. Each used to turn the process-wide switch off and back on by
itself, so one holder turned it back on under another: a key's pause lasted until the next
TPM poll ended. Here the pauses are counted, and the collector comes back when the last
holder lets go (and only if it was on when the first one paused it). Reference counting
frees as usual meanwhile: only cycles wait.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holders = 0
_was_on = False  # the collector was on when the first holder paused it


def pause() -> None:
    global _holders, _was_on
    with _lock:
        if _holders == 0:
            _was_on = gc.isenabled()
            if _was_on:
                gc.disable()
        _holders += 1


def resume() -> None:
    """One :func:`pause` ends; the collector is back once every one has."""
    global _holders, _was_on
    with _lock:
        if _holders == 0:
            raise RuntimeError("gcpause.resume() without a pause")
        _holders -= 1
        if _holders == 0 and _was_on:
            _was_on = False
            gc.enable()


@contextmanager
def paused() -> Iterator[None]:
    pause()
    try:
        yield
    finally:
        resume()
