"""Keeping a private swtpm on the CPU of the thread that talks to it.

Every command wakes swtpm, and every answer wakes the thread that waits for it. A wake-up that
crosses CPUs takes an interrupt (a reschedule IPI), and on a virtual machine sending one is a
VM exit charged to the sender; waking a vCPU that halted is another. On this project's 2-core
VM under two busy loops, the dashboard's unpaced workload took 4.3–4.6 reschedule interrupts
per operation, and a `none` PCR_Extend cost 35 µs (46 µs of its thread's CPU) where paced it
cost 17 µs (23 µs): the per-command/none ratio read ×16 unpaced and ×26 paced. With swtpm on
the caller's CPU, a command is a hand-over on one CPU (the caller sleeps, swtpm runs at once
and wakes it there): 0.00–0.05 interrupts per operation, and ×26–27 at both pacings.

So for a swtpm tpmtop started itself — never anyone else's process — the transport asks which
CPU it runs on before each command (``sched_getcpu``, ~0.15 µs through ctypes) and moves
swtpm's threads there when that changed (``sched_setaffinity``, once per migration of the
caller). It then waits for the answer asleep, not polling (:mod:`tpmtop.tpm.busypoll`): swtpm
needs the CPU a poll would hold. The caller is not pinned between commands: a thread's CPU set
is inherited by every process and thread it starts (`tpmtop run`'s script, the busy loops a
benchmark starts), and the scheduler must stay free to move it, swtpm following, off a busy CPU.

On an idle machine that is not enough: swtpm's answer wakes the caller, and the scheduler
puts a woken thread on an idle CPU rather than on the one swtpm is still finishing on — every
command then moved swtpm, and the caller paid a halted vCPU's wake-up anyway (`none` 48 µs at
max rate, ×13.5 against ×24 paced; 5.3 function-call interrupts per operation). A caller that
keeps moving (``placement_bounces`` moves in a row, each within ``placement_bounce_after`` commands of the
last) is therefore held on swtpm's CPU for each exchange — from the send until the answer is
read, when nothing can start a process — and given its own CPU set back after it (three system
calls with reading that set, ~1.7 µs), for ``placement_hold`` commands; then it is let go, to
see whether it still moves. Nothing is moved before the ``placement_warm``-th command: `tpmtop info` sends fewer.
Idle, that made `none` 24 µs at both pacings (×21–22) and 0.1 interrupts per operation. On a
real TPM, an external swtpm or one CPU, nothing here runs.

All of it is a tuning knob (:mod:`tpmtop.settings`: ``placement`` and its four figures, which
came from that one VM), and off by default: with the esys engine under two busy loops it made
the private swtpm slower than an external one that nothing moves (``benchmarks/tuning.py``).
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Callable

from tpmtop.settings import Settings, current


@functools.cache
def _cpu_getter() -> Callable[[], int] | None:
    """libc's sched_getcpu, or None where swtpm is not to be moved. Looked up once a private
    swtpm has had ``placement_warm`` commands: ctypes is not imported by commands that send fewer."""
    try:
        # the process's CPU set (its first thread's), not the calling thread's: a caller held
        # on one CPU for its exchange must not decide this for every later one
        if len(os.sched_getaffinity(os.getpid())) < 2:
            return None  # one CPU: swtpm shares it already
        import ctypes

        fn = ctypes.CDLL(None).sched_getcpu
    except (AttributeError, OSError):
        return None  # not Linux, or no glibc sched_getcpu
    fn.restype, fn.argtypes = ctypes.c_int, []
    return fn


# What before() found: swtpm is elsewhere (the transport polls or sleeps as it has learnt), on
# the caller's CPU, or on it with the caller held there until after().
ELSEWHERE, HERE, HELD = 0, 1, 2


class FollowCaller:
    """Before each command, moves swtpm to the calling thread's CPU if it is not there.

    The process is checked through its ``Popen`` before each move: once reaped, its pid may
    belong to another program, and that one is never touched. Not thread-safe: the transport
    sends one command at a time."""

    __slots__ = (
        "_bounce_after",
        "_bounces",
        "_bounces_to_hold",
        "_cpu",
        "_getcpu",
        "_hold",
        "_hold_for",
        "_mask",
        "_off",
        "_proc",
        "_since",
        "_warm",
        "holds",
    )

    def __init__(self, proc: subprocess.Popen[bytes], tuning: Settings | None = None) -> None:
        s = tuning or current()
        self._proc = proc
        # Commands sent before swtpm is first moved: a command that sends a handful (`info`,
        # `handles` over SSH) neither waits for a move nor imports ctypes
        self._warm = s.placement_warm  # commands left before the first move
        self._bounce_after = s.placement_bounce_after  # a move within this many commands of the last is a bounce
        self._bounces_to_hold = s.placement_bounces  # this many in a row: the caller is held during each exchange...
        self._hold_for = s.placement_hold  # ...for this many commands, then let go to see whether it still moves
        self._getcpu: Callable[[], int] | None = None  # sched_getcpu, once warm
        self._cpu = -1  # where swtpm was put; -1: nowhere yet
        self._off = False
        self._since = 0  # commands since swtpm was last moved
        self._bounces = 0
        self._hold = 0  # commands left for which the caller is held during the exchange
        self._mask: set[int] = set()  # the held caller's own CPU set, for after()
        self.holds = 0  # how often the caller kept moving, and was held from then on

    def before(self) -> int:
        if self._off:
            return ELSEWHERE
        if self._warm:
            self._warm -= 1
            return ELSEWHERE
        getcpu = self._getcpu
        if getcpu is None:
            getcpu = self._getcpu = _cpu_getter()
            if getcpu is None:
                self._off = True
                return ELSEWHERE
        cpu = getcpu()
        if cpu == self._cpu:
            self._since += 1
        else:
            if self._cpu >= 0 and self._since < self._bounce_after and not self._hold:
                self._bounces += 1
                if self._bounces >= self._bounces_to_hold:
                    self._bounces, self._hold = 0, self._hold_for
                    self.holds += 1
            else:
                self._bounces = 0
            if not self._place(cpu):
                return ELSEWHERE
            self._cpu, self._since = cpu, 0
        if not self._hold:
            return HERE
        self._hold -= 1
        try:
            self._mask = os.sched_getaffinity(0)
            os.sched_setaffinity(0, (cpu,))  # 0: this thread only
        except OSError:
            return HERE
        return HELD

    def after(self) -> None:
        """After a HELD exchange: the caller's own CPU set back."""
        try:
            os.sched_setaffinity(0, self._mask)
        except OSError:
            pass

    def _place(self, cpu: int) -> bool:
        proc = self._proc
        try:
            if proc.returncode is not None:
                raise ProcessLookupError
            for tid in os.listdir(f"/proc/{proc.pid}/task"):
                os.sched_setaffinity(int(tid), (cpu,))
        except (OSError, ValueError):
            # gone, or not allowed there (a cpuset, a container): leave it where the
            # scheduler puts it, as for any other TPM
            self._off = True
            return False
        return True
