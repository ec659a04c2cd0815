"""The gate between a source's workload and the dashboard that shows it: the screen holds the
workload between two of its operations while it draws (a key's screen, a refresh's frame), and
asks whether an operation is under way. Owned by the workload (``LiveSource.gate``); a source
without a workload has none (``Source.gate`` is None). No Textual here.

Why: the workload and the dashboard share one process and its GIL.

- a key: unpaced, the workload's thread takes the GIL back after each of its round trips, so a
  key's few milliseconds of Python took 3-5 times as long on the clock (benchmarks/ui_load.py);
- a refresh: the other way round, an operation under way while the dashboard draws waits for
  the GIL after each of its round trips, and the refresh's milliseconds land in the operation's
  time, which the dashboard then shows as the TPM's tail. The refresh waits for the operation
  under way (:attr:`UiGate.busy`), then draws while the workload waits.

An operation under way is finished and timed as usual: only the gap between two operations
grows, and what is measured is each operation.
"""

from __future__ import annotations

import threading
import time
from enum import StrEnum


class UiHold(StrEnum):
    """What the dashboard holds the workload for: a key's screen, or a refresh's frame. Each is
    released on its own; the workload waits for both."""

    KEY = "key"
    REFRESH = "refresh"


# A key's screen is drawn within this on a loaded machine, and a refresh's frame within the
# other; past it the workload runs again even if the dashboard never said it was done.
UI_HOLD_MAX_S = {UiHold.KEY: 0.25, UiHold.REFRESH: 0.1}


class UiGate:
    def __init__(self) -> None:
        self.idle = threading.Event()  # cleared while the dashboard holds the workload
        self.idle.set()
        self.holds: dict[UiHold, float] = {}  # what holds the workload, and until when (time.perf_counter)
        # An operation of the workload is under way (set by the workload before it looks at
        # the holds; the dashboard holds before it looks at this: whichever comes second sees
        # the other, so no operation starts once a refresh has found the workload idle).
        self.busy = False

    def hold(self, why: UiHold = UiHold.KEY) -> None:
        """The workload's next operation waits until :meth:`release`, at most UI_HOLD_MAX_S
        (UI thread)."""
        self.holds[why] = time.perf_counter() + UI_HOLD_MAX_S[why]
        self.idle.clear()

    def release(self, why: UiHold = UiHold.KEY) -> None:
        self.holds.pop(why, None)
        if not self.holds:
            self.idle.set()

    def held(self) -> bool:
        """A hold that has not run out (one the dashboard never released ends at its time)."""
        if self.idle.is_set():
            return False
        now = time.perf_counter()
        return any(until > now for until in list(self.holds.values()))

    def wait(self, stopping: threading.Event) -> None:
        """Until no hold is in force, or ``stopping`` is set (the workload's thread)."""
        while self.held() and not stopping.is_set():
            left = max(list(self.holds.values()), default=0.0) - time.perf_counter()
            if left > 0:
                self.idle.wait(left)

    def open(self) -> None:
        """Let a workload waiting here go (the source closes)."""
        self.idle.set()
