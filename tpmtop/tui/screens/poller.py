"""The main screen's poll chain: at most one poll in flight and at most one timer armed,
whoever asks for a poll (the chain itself, a loss the workload saw, a flush to confirm).

The chain once asked the workers whether a poll was still running; a poll that had just
posted its own loss was, so nobody re-armed it and a TPM lost while the workload was stopped
was never found again. The chain now keeps its own state, changed only on the UI thread by
the poll's outcome (exactly one of PollDone, PollFailed, Disconnected from the poller).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from textual.screen import Screen
    from textual.timer import Timer


class PollChain:
    """Polls never overlap, even when the TPM answers slower than the poll interval, and
    never stop: every outcome arms the next."""

    def __init__(self, screen: Screen[Any], start_poll: Callable[[], None]) -> None:
        self._screen = screen
        self._start_poll = start_poll
        self._in_flight = False
        self._again = False  # asked for while one was in flight: the next starts at its outcome
        self._timer: Timer | None = None

    def now(self) -> None:
        """A poll as soon as possible: at once, or at the outcome of the one in flight."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if self._in_flight:
            self._again = True
            return
        self._in_flight = True
        self._start_poll()

    def later(self, delay: float) -> None:
        """A poll after ``delay``, unless one is in flight (its outcome arms the next) or armed."""
        if self._in_flight or self._timer is not None:
            return
        self._timer = self._screen.set_timer(delay, self._fire)

    def finished(self, next_in: float) -> None:
        """The poll in flight reported its outcome: the next one after ``next_in`` seconds."""
        self._in_flight = False
        if self._again:
            self._again = False
            self.now()
        else:
            self.later(next_in)

    def _fire(self) -> None:
        self._timer = None
        self.now()
