"""Log lines that a peer can cause, at most one per interval.

A server's stderr (the operator's journal) must not grow with what a stranger does: 45,000
refused connections once wrote 24,037 lines. Every line a peer can trigger goes through a
:class:`RateLimitedLog`: the first line of a quiet spell is said at once, what follows within
the interval is counted, and a summary line says the counts (per kind) and the latest line
when the interval is over — so a flood costs one line a second, and a lone event still one
line, at once. :meth:`RateLimitedLog.tick` says a due summary (the server's loop calls it);
:meth:`RateLimitedLog.flush` says what is pending now (at stop). No Textual; thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

INTERVAL_S = 1.0


class RateLimitedLog:
    def __init__(self, log: Callable[..., None], interval_s: float = INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic, burst: int = 1) -> None:
        self._log = log
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        # Lines said at once per interval (the proxy's "client N connected" lines: a script's
        # tools each say theirs, a flood of new processes is held back to this many a second)
        self.burst = burst
        self._said_in = 0  # lines said in the interval that began at _last
        self._last = -1e18  # when the interval of the lines said last began
        self._held: dict[str, int] = {}  # kind -> lines counted, not said, since then
        self._latest: tuple[str, tuple[Any, ...]] | None = None
        self.said = 0  # lines written (tests and the proxy's report read it)
        self.total: dict[str, int] = {}  # every line asked for, said or not, by kind

    def __call__(self, kind: str, text: str, *args: Any) -> None:
        """``kind``: what the line is about ("refused", "over the limit", ...); ``args`` go to
        the log callable after the text (the proxy's line kind)."""
        with self._lock:
            self.total[kind] = self.total.get(kind, 0) + 1
            now = self._clock()
            fresh = now - self._last >= self.interval_s
            if not self._held and (fresh or self._said_in < self.burst):
                if fresh:
                    self._last = now
                    self._said_in = 0
                self._said_in += 1
                self.said += 1
                out: tuple[str, tuple[Any, ...]] | None = (text, args)
            else:
                self._held[kind] = self._held.get(kind, 0) + 1
                self._latest = (text, args)
                out = self._due(now)
        if out is not None:
            self._log(out[0], *out[1])

    def _due(self, now: float) -> tuple[str, tuple[Any, ...]] | None:
        """The summary line if the interval is over (under the lock)."""
        if not self._held or now - self._last < self.interval_s:
            return None
        return self._summary(now)

    def _summary(self, now: float) -> tuple[str, tuple[Any, ...]]:
        assert self._latest is not None
        text, args = self._latest
        since = now - self._last
        counts = ", ".join(f"{n:,} {kind}" for kind, n in self._held.items())
        self._held.clear()
        self._latest = None
        self._last = now
        self._said_in = self.burst  # a summary ends its interval: the next line waits for the next one
        self.said += 1
        return (f"{counts} in the last {since:.1f} s (lines held back to one per {self.interval_s:g} s); "
                f"the latest: {text}", args)

    def tick(self) -> None:
        """Say the summary if one is due (call this a few times a second)."""
        with self._lock:
            out = self._due(self._clock())
        if out is not None:
            self._log(out[0], *out[1])

    def flush(self) -> None:
        """Say what is held now, due or not (at stop)."""
        with self._lock:
            out = self._summary(self._clock()) if self._held else None
        if out is not None:
            self._log(out[0], *out[1])
