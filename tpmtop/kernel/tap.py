"""The kernel's TPM traffic, live, as recorder events: what the dashboard's ``--kernel`` (and
``--passive``, where it can trace) reads.

A reader thread takes ``trace_pipe`` lines from tpmtop's own probes (:class:`~tpmtop.kernel.probes.Probes`)
or from a trace file someone else wrote (followed like ``tail -f``), parses them and hands
each command to a :class:`~tpmtop.recorder.Recorder` under origin ``kernel`` — the same ring,
histograms and stream rows as the commands tpmtop sends itself, so every panel reads them
alike — and each operation (one PCR extend, one get_random) to :class:`KernelAccounts`.
tpmtop sends no TPM command here. Layer: kernel; no Textual.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tpmtop.kernel import ops as kops
from tpmtop.kernel.live import read_lines
from tpmtop.kernel.trace_pipe import KernelCommand, KernelOp, Parser, path_label
from tpmtop.recorder import DEFAULT_CAPACITY, CommandStats, Recorder
from tpmtop.tpm.exchange import Origin

if TYPE_CHECKING:
    from tpmtop.kernel.probes import Probes

ORIGIN = Origin.KERNEL


class KernelTap:
    """``KernelTap.arm()`` (probes, root) or ``KernelTap(trace_path=F)``; then ``start()``;
    ``close()`` stops the reader and removes the probes (idempotent)."""

    def __init__(self, *, probes: Probes | None = None, trace_path: str | None = None, recorder: Recorder | None = None,
                 poll_s: float = 0.2, this_machine_now: bool | None = None) -> None:
        """``this_machine_now``: the trace is of this kernel as it runs (the probes, or a file the
        dashboard follows while this machine writes it), so a task that is one of tpmtop's own
        threads is tpmtop's; default: only with the probes. A saved trace's pids are another
        time's, and one that is a thread of ours now by reuse is not tpmtop's."""
        if (probes is None) == (trace_path is None):
            raise ValueError("a KernelTap reads either its probes or a trace file")
        self.probes = probes
        self.trace_path = trace_path
        self.this_machine_now = probes is not None if this_machine_now is None else this_machine_now
        self.recorder = recorder if recorder is not None else Recorder(keep_buffers=False)
        self.parser = Parser()
        self.assembler = kops.Assembler()
        self.accounts = kops.KernelAccounts()
        self.lock = threading.Lock()  # the reader writes accounts and rings; the UI reads them
        self.commands: deque[KernelCommand] = deque(maxlen=DEFAULT_CAPACITY)  # for an export
        self.ops: deque[KernelOp] = deque(maxlen=DEFAULT_CAPACITY)
        self.error: str | None = None  # why reading stopped, if it did
        # A trace file with none of tpmtop's probe events: what it is instead ("ftrace",
        # "bpftrace": the boot report reads those), so the screen can say so rather than wait.
        self.foreign: str | None = None
        self.lines_read = 0
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # trace clock -> perf_counter_ns: 0 when the probes' instance runs on the monotonic
        # clock (Python's perf_counter), else fixed at the first command (a file's old times).
        self._offset: int | None = 0 if probes is not None and getattr(probes, "clock", "") == "mono" else None
        self.started_unix_ns = time.time_ns()
        # (path label, command code) -> CommandStats: a GetRandom from hwrng and one from a
        # program through /dev/tpmrm0 are different things, priced apart in the Latency panel.
        self.by_path: dict[tuple[str, int | None], CommandStats] = {}

    @classmethod
    def arm(cls) -> KernelTap:
        """Arm tpmtop's probes (root, tracefs, kprobe events): a KernelTraceError says why not."""
        from tpmtop.kernel.probes import Probes

        p = Probes()
        p.__enter__()
        try:
            return cls(probes=p)
        except BaseException:
            p.close()
            raise

    # -- what it reads ---------------------------------------------------------------------------
    @property
    def source_text(self) -> str:
        if self.probes is not None:
            funcs = "tpm_transmit" + (" and tpm_transmit_cmd" if self.probes.have_cmd else "")
            return f"kprobes on {funcs} (group {self.probes.group})"
        return f"trace file {self.trace_path}"

    @property
    def this_machine(self) -> bool:
        """Whether the traffic is this machine's kernel's (its probes, or its own tracefs), so
        that this machine's sysfs and identity belong beside it; a saved trace may be anyone's."""
        if self.probes is not None:
            return True
        from tpmtop.kernel.probes import TRACEFS_CANDIDATES

        path = os.path.realpath(self.trace_path or "")
        return any(path.startswith(root + "/") for root in TRACEFS_CANDIDATES)

    def reanchor(self) -> None:
        if not (self.probes is not None and getattr(self.probes, "clock", "") == "mono"):
            self._offset = None

    @property
    def pipe_path(self) -> str | int:
        """The probes' trace_pipe (a descriptor they opened before enabling the events), or the file."""
        if self.probes is not None:
            fd: int | None = self.probes.pipe_fd
            return fd if fd is not None else str(self.probes.pipe_path())
        return self.trace_path or ""

    def start(self) -> KernelTap:
        self._thread = threading.Thread(target=self._run, name="tpmtop-kernel-tap", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            for lines in read_lines(self.pipe_path, self._stop.is_set, self._poll_s):
                self.feed(lines)
        except OSError as e:
            self.error = f"reading {self.pipe_path} failed: {e.strerror or e}"
        except Exception as e:  # a parser bug must not pass silently: the header shows it
            self.error = f"{type(e).__name__}: {e}"

    def feed(self, lines: Iterable[str]) -> list[KernelCommand]:
        """Parse ``lines``, record what they complete and return the commands completed (the
        reader thread; ``tpmtop kernel`` and tests call it directly)."""
        lines = lines if isinstance(lines, list) else list(lines)
        done, seen = kops.parse_in_order(self.parser, lines)
        if self.lines_read < 1000 and not self.parser.events and self.foreign is None:
            from tpmtop.boot.traces import sniff_format

            self.foreign = sniff_format(lines[:1000])
        self.lines_read += len(lines)
        if not seen:
            return done
        with self.lock:
            kops.route(seen, self.parser, self.assembler, self._add_command, self._add_op)
        return done

    def finish(self) -> list[KernelCommand]:
        """The commands still waiting for a response code that will not come (the trace ended)."""
        done = self.parser.flush()
        if done:
            with self.lock:
                for kc in done:
                    self._add_command(kc)
        return done

    def _add_command(self, kc: KernelCommand) -> None:
        """A completed command into the recorder, the accounts and the list (under the lock)."""
        self._record(kc)
        self.accounts.add_command(kc)
        self.commands.append(kc)

    def _add_op(self, op: KernelOp) -> None:
        self.accounts.add_op(op)
        self.ops.append(op)

    def _ours(self, pid: int) -> bool:
        """Whether a traced task is one of tpmtop's own threads: the kernel sends PCR_Read
        for tpmtop's System panel (sysfs pcr-sha256 files) — tpmtop's one effect on the TPM
        here, shown as such."""
        # Only for a trace of this kernel now: a saved trace's pids are another time's (or
        # another machine's), and one that happens to be a thread of ours now is not tpmtop's
        # (a fixture's tpm2_getrandom-4242 was shown as "tpmtop's own" under pid reuse).
        # Not cached: the dashboard's workers are new threads, and pids are reused. A stat
        # per kernel command (a few µs; the kernel sends at most thousands a second) is cheap.
        return self.this_machine_now and os.path.exists(f"/proc/self/task/{pid}")

    def _record(self, kc: KernelCommand) -> None:
        if self._ours(kc.pid):
            # tpmtop's System panel reads PCR files (the kernel sends PCR_Read), and under an
            # IMA policy that measures what root reads, a file tpmtop opens is an extend
            kc.path = f"tpmtop's own: {kc.path}"
        if self._offset is None:
            self._offset = time.perf_counter_ns() - (kc.t_ns + kc.wire_ns)
        answered = kc.answered
        label = path_label(kc.path)
        st = self.by_path.get((label, kc.cc))
        if st is None:
            st = self.by_path[(label, kc.cc)] = CommandStats()
        if answered:
            st.hist.record(kc.wire_ns)
            st.last_ns = kc.wire_ns
            st.recent.append(kc.wire_ns)
        if not answered or (kc.rc is not None and kc.rc != 0 and not kc.expected_error):
            st.errors += 1
        self.recorder.observed(
            kc.t_ns + self._offset, kc.cc, kc.wire_ns, origin=ORIGIN, rc=kc.rc, answered=answered,
            cmd_size=kc.size or 0, rsp_size=(kc.ret or 0) if answered else 0, client=f"{kc.comm}-{kc.pid} · {kc.path}",
            note=label,
            error=None if answered or kc.ret is None else f"tpm_transmit returned {kc.ret} ({_errno(kc.ret)})",
            expected=kc.expected_error)

    def no_events_note(self) -> str | None:
        """Why a trace file shows nothing, once that is clear (the dashboard's stream and header
        say it); None while it may still bring tpmtop's probe events."""
        if self.trace_path is None or self.parser.events or not self.lines_read:
            return None
        from tpmtop.boot.traces import FORMAT_NAMES

        what = FORMAT_NAMES.get(self.foreign or "")
        if what is None:
            return f"{self.lines_read:,} lines read, none of them tpmtop kprobe events (yet)"
        return (f"this file is {what}, not tpmtop kprobe events: read it with "
                f"tpmtop boot --trace {self.trace_path}")

    # -- the end ---------------------------------------------------------------------------------
    def close(self) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(self._poll_s * 10 + 2)
            self.finish()
        if self.probes is not None:
            self.probes.close()

    def capture(self) -> dict[str, Any]:
        """What was seen, as a capture (``tpmtop kernel --json``'s contract)."""
        from tpmtop.kernel.capture import kernel_capture

        with self.lock:
            commands, ops = list(self.commands), list(self.ops)
            mode = self.accounts.mode()[0]
        unix = time.time_ns() - time.perf_counter_ns()  # perf_counter -> wall clock, now
        t0 = (commands[0].t_ns + (self._offset or 0) + unix) if commands else time.time_ns()
        return kernel_capture(commands, ops, t0, self.parser, "kernel:" + self.source_text, mode,
                              this_machine=self.this_machine)


def _errno(ret: int) -> str:
    try:
        return os.strerror(-ret)
    except (ValueError, OverflowError):
        return "?"
