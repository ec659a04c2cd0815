"""Holding a response until a deadline, to the microsecond, on a loaded machine.

A latency profile holds each response until its figure has passed since the command was
sent. ``time.sleep()`` alone overshoots by the scheduler's wake-up latency: ~60 µs on an idle
machine (50 µs of it the kernel's default timer slack), hundreds of µs on a busy 2-core one —
a systematic bias on every held command. So: the thread's timer slack goes to 1 ns, the sleep
ends early by a margin, and the last stretch is spun on the clock. The margin follows the
wake-up lateness actually seen (a decaying maximum, 100 µs … 2 ms), so an idle machine spins
~100 µs and a loaded one spins long enough to absorb its late wake-ups.
``benchmarks/shaper_bias.py`` measures what bias remains.

A tuning knob (:mod:`tpmtop.settings`): ``hold_clock`` off is a plain ``time.sleep`` to the deadline.
"""

from __future__ import annotations

import threading
import time

from tpmtop.settings import current

MIN_MARGIN_NS = 100_000
MAX_MARGIN_NS = 2_000_000
_DECAY = 0.95  # per sleep: one late wake-up widens the margin for the next few dozen holds

_margin_ns = 200_000
_local = threading.local()


def _low_timer_slack() -> None:
    """PR_SET_TIMERSLACK(1 ns) for this thread (Linux); elsewhere nothing to do."""
    _local.done = True
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)  # PR_SET_TIMERSLACK
    except Exception:
        pass


def sleep_until(deadline_ns: int) -> None:
    """Return at ``time.perf_counter_ns() >= deadline_ns``, as close to it as possible."""
    global _margin_ns
    if not current().hold_clock:
        left = deadline_ns - time.perf_counter_ns()
        if left > 0:
            time.sleep(left / 1e9)
        return
    if not getattr(_local, "done", False):
        _low_timer_slack()
    clock = time.perf_counter_ns
    left = deadline_ns - clock()
    if left <= 0:
        return
    margin = _margin_ns
    if left > margin:
        target = deadline_ns - margin
        time.sleep(max(0, target - clock()) / 1e9)
        late = clock() - target  # how far past its target the sleep woke
        m = max(int(margin * _DECAY), 2 * late + 50_000)
        _margin_ns = min(MAX_MARGIN_NS, max(MIN_MARGIN_NS, m))
    while clock() < deadline_ns:
        pass
