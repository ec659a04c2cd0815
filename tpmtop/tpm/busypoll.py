"""Polling briefly for an answer that is microseconds away, instead of sleeping in the kernel.

On a virtual machine an idle vCPU halts, and waking a thread that sleeps in ``recv`` then costs
a halt exit and an interrupt on the host: 40–60 µs per wake-up on this project's 2-core VM
when it is idle (a raw GetRandom round trip to swtpm: 70–87 µs sleeping, 23 µs polling; the
same sleeping round trip at load 2 is 24–30 µs, because a busy vCPU never halts). That wake-up
is host time, but a transport that sleeps counts it as the TPM's: the wire time of a swtpm
command would be mostly the VM's idle state, and tpmtop would be slower than the client it
measures on exactly the quiet machine where people benchmark.

So a receive that expects a fast answer may first poll without blocking (``MSG_DONTWAIT``, the
GIL released for each call), for at most a budget, then sleep as before. Whether to poll, and
for how long, is learnt per command code from the exchanges seen (:class:`AnswerBudget`): the
transport polls only where polling measured faster than sleeping, for up to twice the faster
wait (never more than :data:`POLL_CAP_NS`); a command that takes longer than the cap (a key
generation, any real TPM chip — milliseconds) is never polled for, so the CPU spent polling is
bounded by the TPM's own time on a software TPM and is nothing on hardware. The proxy polls
for the rest of a request and for a busy client's next one (:class:`RequestPoll`). The
kernel's own SO_BUSY_POLL does not apply: it polls a network device's queue, and loopback and
Unix sockets have none. A private swtpm that runs on the caller's CPU (:mod:`tpmtop.tpm.placement`)
is never polled for: it needs the CPU the poll would hold.

A tuning knob (:mod:`tpmtop.settings`): ``busy_poll`` off never polls, ``busy_poll_cap_us``
sets :data:`POLL_CAP_NS`'s figure. Read when a transport or a proxy connection starts
(:func:`poll_cap_ns`).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

from tpmtop.settings import current

# The longest a receive polls before it sleeps, by default (``busy_poll_cap_us``): a swtpm
# command on this VM answers in 15–80 µs; beyond ~200 µs the halt's 40–60 µs wake-up is a
# small share of the wait.
POLL_CAP_NS = 200_000


def _may_poll() -> bool:
    # Polling holds a CPU while the TPM (swtpm, another process) works: with one CPU to run on
    # the answer could only come once the poll gave up, so there it never starts.
    try:
        return len(os.sched_getaffinity(0)) > 1
    except (AttributeError, OSError):
        return (os.cpu_count() or 1) > 1


POLLING = _may_poll()


def poll_cap_ns() -> int:
    """How long a receive may poll, in ns: 0 where it never does (one CPU, or ``busy_poll`` off)."""
    s = current()
    return s.busy_poll_cap_us * 1000 if POLLING and s.busy_poll else 0


def recv_soon(sock: socket.socket, n: int, budget_ns: int, flags: int = 0,
              _now: Callable[[], int] = time.perf_counter_ns) -> bytes | None:
    """Up to ``n`` bytes that arrive within ``budget_ns``, polled for without sleeping; None if
    none came (the caller then sleeps in a blocking receive). ``b""`` is the peer's close."""
    recv = sock.recv
    flags |= socket.MSG_DONTWAIT
    deadline = _now() + budget_ns
    while True:
        try:
            return recv(n, flags)
        except (BlockingIOError, InterruptedError):
            if _now() >= deadline:
                return None


class AnswerBudget:
    """Per command code: whether to poll for its answer, and for how long.

    Polling wins when the TPM's process runs on another CPU (the answer comes while this thread
    still runs; sleeping would pay a halted vCPU's wake-up); it loses when the scheduler puts a
    swtpm woken by our command on the CPU we poll on, which the kernel does for a waker that is
    about to sleep — then swtpm can only answer once the poll gives up, and sleeping at once
    hands it the CPU directly (on this project's VM, paced: FlushContext 13 µs sleeping, 219 µs
    behind a 200 µs poll; unpaced, the other way round: 49 µs polling, 87 µs sleeping). Which
    happens is the scheduler's choice and changes with the load, so both waits are measured:
    an exponentially weighted mean of the wire time of each (weight 1/4 for the newest), and
    the faster one is used, the other tried every :data:`EXPLORE`-th command of that code so
    that a change is noticed. A poll lasts twice the faster mean, at most :data:`POLL_CAP_NS`;
    a command whose answer takes longer than the cap (a key generation, any TPM chip) is never
    polled for."""

    EXPLORE = 32

    __slots__ = ("_cap", "_n", "_polled", "_slept")

    def __init__(self, cap_ns: int | None = None) -> None:
        self._polled: dict[bytes, int] = {}
        self._slept: dict[bytes, int] = {}
        self._n: dict[bytes, int] = {}
        self._cap = poll_cap_ns() if cap_ns is None else cap_ns  # 0: never poll

    def budget(self, cc: bytes) -> int:
        cap = self._cap
        if not cap or not POLLING:
            return 0
        polled, slept = self._polled.get(cc), self._slept.get(cc)
        if polled is None:
            return cap  # first, a poll, to learn
        if slept is None:
            return 0  # then a sleep
        fast = min(polled, slept)
        if fast > cap:
            return 0
        n = self._n[cc] = self._n.get(cc, 0) + 1
        poll = (polled <= slept) != (n % self.EXPLORE == 0)
        return min(2 * fast, cap) if poll else 0

    def learn(self, cc: bytes, wire_ns: int, polled: bool) -> None:
        means = self._polled if polled else self._slept
        mean = means.get(cc)
        means[cc] = wire_ns if mean is None else mean + (wire_ns - mean) // 4


class RequestPoll:
    """Whether to poll for a client connection's next request (the proxy, after answering):
    yes while its requests keep arriving within the poll — a program sending commands back to
    back; after one that did not, it skips 1, 2, 4 … up to 64 requests before trying again, so
    a client that pauses between commands costs at most one poll in 64 of them."""

    __slots__ = ("_backoff", "_cap", "_skip")

    def __init__(self, skip: int = 0, cap_ns: int | None = None) -> None:
        self._skip = skip  # requests to wait for without polling, first
        self._backoff = 0
        self._cap = poll_cap_ns() if cap_ns is None else cap_ns  # 0: never poll

    def budget(self) -> int:
        if not self._cap or not POLLING:
            return 0
        if self._skip:
            self._skip -= 1
            return 0
        return self._cap

    def came(self, in_time: bool) -> None:
        if in_time:
            self._backoff = 0
        else:
            self._backoff = min(max(1, 2 * self._backoff), 64)
            self._skip = self._backoff
