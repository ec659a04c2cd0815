"""Rates and tpmtop's own CPU use, for the header. No Textual here."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class RateMeter:
    """Operations per second over a sliding window of a few seconds."""

    def __init__(self, window_s: float = 3.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window_s
        self.clock = clock
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, total: int) -> float:
        now = self.clock()
        self.samples.append((now, total))
        while len(self.samples) > 2 and now - self.samples[0][0] > self.window:
            self.samples.popleft()
        (t0, n0), (t1, n1) = self.samples[0], self.samples[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 and n1 >= n0 else 0.0

    def reset(self) -> None:
        self.samples.clear()


class CpuMeter:
    """tpmtop's own CPU use, as a share of one core: the UI thread's (``time.thread_time`` read
    on that thread) and the whole process's (workload, poller and recorder included), over the
    last ``window_s``. The dashboard shows both so a user can tell tpmtop's cost from the TPM's."""

    def __init__(self, window_s: float = 2.0) -> None:
        self.window = window_s
        self._last = (time.monotonic(), time.thread_time(), time.process_time())
        self.ui = 0.0
        self.process = 0.0

    def sample(self) -> None:
        now, th, pr = time.monotonic(), time.thread_time(), time.process_time()
        t0, th0, pr0 = self._last
        if now - t0 < self.window:
            return
        self.ui = (th - th0) / (now - t0) * 100
        self.process = (pr - pr0) / (now - t0) * 100
        self._last = (now, th, pr)
