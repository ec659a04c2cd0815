"""The dashboard's side of a live TPM: polling, user actions and the workload loop, as plain
blocking calls that the dashboard runs in thread workers. No Textual here.

Every use of the TPM is a job on the connection's owner thread (:mod:`tpmtop.tpm.owner`):
one workload operation, one poll, one user action at a time, in the order asked (a FIFO, so
a workload running flat out cannot starve the poller). Each job carries its labels (origin
``workload``, ``poll`` or ``user``), so a poll's GetCapability can never be stamped
"workload" (or the reverse) and tpmtop's own traffic never pollutes the workload's
histograms.
"""

from __future__ import annotations

import datetime as _dt
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from tpm2_pytss.constants import TPM2_RC

from tpmtop.errors import (
    NullNameChanged,
    TpmConnectionError,
    TpmError,
    TpmtopError,
    UsageError,
)
from tpmtop.sources.protocol import Capabilities, HeaderInfo, TimingsView

DEFAULT_RATE = 100.0  # ops/s the dashboard's workload starts at
RATES = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 0.0)  # 0: unpaced
MAX_CONSECUTIVE_ERRORS = 3
BURST_EVERY_S = 0.1  # a paced workload wakes up at most 10 times a second...
MIN_BURST = 4  # ...and runs at least this many operations back to back when it does
BURST_JOB_S = 0.02  # one job on the TPM's owner thread runs at most this long (then the queue turns)
UNPACED_BURST = 10  # unpaced: operations per job (each hand-off between threads costs a wake-up)


def burst_size(rate: float) -> int:
    """Operations per burst at ``rate`` ops/s (0: unpaced, never sleeping, UNPACED_BURST a job)."""
    if rate <= 0:
        return UNPACED_BURST
    return max(MIN_BURST, round(rate * BURST_EVERY_S))


def pacing_json(rate: float) -> dict:
    """A capture's ``pacing``: what the operations ran under (ops/s 0 = unpaced)."""
    if rate <= 0:
        return {"rate_ops_per_s": 0, "burst": UNPACED_BURST, "note": "unpaced: operations back to back"}
    n = burst_size(rate)
    return {"rate_ops_per_s": rate, "burst": n, "burst_every_s": round(n / rate, 3),
            "note": f"bursts of {n} operations back to back every {n / rate:g} s; only the first of "
                    "each burst pays the host's wake-up"}
# A full TPM (object slots, session slots, session handles): retrying cannot help until
# someone frees a slot, and every retry is one more failed command on the operator's TPM.
SLOTS_FULL = {int(TPM2_RC.OBJECT_MEMORY): "object slots", int(TPM2_RC.SESSION_MEMORY): "session slots",
              int(TPM2_RC.SESSION_HANDLES): "session handles"}


@dataclass
class PollResult:
    entries: list  # tpmtop.tpm.handles.HandleEntry
    var: dict[str, int]
    t: float  # monotonic time of the poll
    seq: int = 0  # the recorder's last command when the poll ran (the TPM's list is as of it)


class LiveSource:
    """A TPM: polled for handles and slots, driven by a workload, recorded command by command."""

    def __init__(self, conn, *, read_only: bool = False, poll_interval: float | None = None,
                 rate: float = DEFAULT_RATE, start_running: bool | None = None, engine: str = "native",
                 mode: str = "per-command", op: str = "extend", pcr: int = 16, profile_note: str | None = None):
        self.conn = conn
        self.recorder = conn.recorder
        self.read_only = read_only
        self.simulated = bool(conn.simulated)
        # The observer effect concerns a kernel's TPM: a device node, not a simulator on a socket.
        self.kernel_device = conn.target.kind == "device"
        self.poll_interval = poll_interval or (1.0 if self.simulated else 5.0)
        if start_running is None:
            start_running = self.simulated  # a real TPM's PCR 16 is not ours to change unasked
        self.running = bool(start_running) and not read_only
        self.engine, self.mode, self.op, self.pcr = engine, mode, op, pcr
        self.rate = rate
        self.workload = None
        self.workload_error: str | None = None
        self.pause_reason: str | None = None  # why the workload paused itself (header)
        self.errors_in_row = 0
        # Accounts of earlier TPM lives (a reset, or a restart found by reconnecting), oldest
        # first: never merged with the current one, so no panel mixes two TPMs' numbers.
        self.periods: list[dict] = []
        self.boundaries: list[tuple[float, str]] = []  # (time.time(), why) of each new TPM life
        self.connected = True
        self.last_error: str | None = None
        self.stopping = threading.Event()
        self.resume = threading.Event()
        if self.running:
            self.resume.set()
        self.identity = None
        self.tcti = conn.target.tcti
        # Set by tpmtop.profiles.apply.apply_profile: every latency shown is then the profile's.
        self.profile: str | None = getattr(conn, "profile_name", None)
        self.profile_note = profile_note or (f"profile {self.profile}" if self.profile else None)
        self._old_accounts: dict = {}
        # (engine, mode, op) -> every rate its operations ran at: a capture says so per run.
        self.rates_run: dict[tuple[str, str, str], set[float]] = {}
        # (monotonic s, engine, mode, op, total ns) of the latest operations: the Modes panel's
        # time series of op p50 across mode switches. Bounded: at max rate ~10 minutes of `none`
        # would be millions; 200,000 is a few minutes unpaced, over half an hour at 100/s.
        self.timeline: deque = deque(maxlen=200_000)
        from tpmtop.sources.rows.latency import ErrorBook

        self.errors = ErrorBook()  # fed by the dashboard from the recorder's new events
        self._close_lock = threading.Lock()
        self._closed = False

    # -- what the dashboard reads (tpmtop.sources.protocol.Source) ------------------------------
    @property
    def caps(self) -> Capabilities:
        ro = self.read_only
        return Capabilities("live", live=True, handles=True, timings=True, workload=True, changes_tpm=not ro,
                            selects_runs=not ro, export=True, sysfs=self.kernel_device,
                            why_not="--read-only: tpmtop sends nothing that changes the TPM" if ro else "")

    def state(self) -> str:
        if not self.connected:
            return "disconnected"
        if self.read_only:
            return "read-only"
        return "running" if self.running else "paused"

    def header(self) -> HeaderInfo:
        st = self.state()
        ident = self.identity
        rate = "rate max" if self.rate == 0 else f"rate {self.rate:g}/s, bursts of {burst_size(self.rate)}"
        extra = f"poll {self.poll_interval:g} s"
        if st == "disconnected":
            extra = f"retrying: {self.last_error or ''}"[:80]
        marker = ""
        if st == "paused" and self.pause_reason:
            marker = self.pause_reason
        elif self.boundaries:
            marker = f"TPM period {len(self.boundaries) + 1}"
        return HeaderInfo(state=st, identity=f"{ident.manufacturer} {ident.vendor} fw {ident.firmware}" if ident else "…",
                          tcti=self.tcti, simulated=self.simulated, engine=self.engine, mode=self.mode, op=self.op,
                          rate=rate, extra=extra, profile=self.profile, marker=marker, tooltip=self.profile_note)

    def runs(self) -> list:
        from tpmtop.sources.runs import runs_from_accounts

        return runs_from_accounts(self.accounts())

    def timings(self, runs: list | None = None) -> TimingsView:
        """The current (engine, mode, op) run: its operation rows and its commands, as replay
        shows a capture's run — never commands of other modes beside this mode's operations."""
        from tpmtop.sources.rows.latency import (
            command_rows_live,
            command_rows_run,
            op_rows,
        )

        runs = self.runs() if runs is None else runs
        current = next((r for r in runs if r.key == (self.engine, self.mode, self.op)), None)
        label = f"{self.engine}/{self.mode}"
        note = ""
        if current is None:
            rows = command_rows_live(self.recorder, None)  # nothing of this run yet: what went on the wire
            subtitle = f"no {label} operation yet; all origins"
        else:
            live = {r.key: r for r in command_rows_live(self.recorder, "workload")}
            rows = command_rows_run(current)
            for r in rows:  # the newest samples (sparkline, last) and error counts come from the wire
                w = live.get(r.key)
                if w is not None:
                    r.last_us, r.recent_us, r.errors = w.last_us, w.recent_us, w.errors
            rows = op_rows(current) + rows
            subtitle = f"run {label}/{self.op} · {current.ops} ops"
        if self.boundaries:
            since = time.strftime("%H:%M:%S", time.localtime(self.boundaries[-1][0]))
            subtitle += f" · this TPM period (since {since})"
            earlier = sum(a.ops for p in self.periods for a in p.values())
            note = (f"since {since}; {len(self.periods)} earlier period{'s' if len(self.periods) != 1 else ''} "
                    f"kept apart ({earlier} ops)")
        return TimingsView(rows, subtitle, label, note)

    def values(self, what: str) -> list[str]:
        from tpmtop.sessions.modes import ENGINES, MODES, OPS

        return list({"engine": ENGINES, "mode": MODES, "op": OPS}[what])

    # -- the TPM's owner thread -------------------------------------------------------------
    def on_tpm(self, fn, *args, origin: str = "user", check_stopping: bool = True):
        """Run ``fn(transport, *args)`` as one job on the TPM's owner thread (after any job
        already queued) and return its result. A lost connection is noted here."""
        if check_stopping and self.stopping.is_set():
            raise TpmtopError("tpmtop is stopping")
        try:
            return self.conn.call(fn, *args, origin=origin)
        except TpmConnectionError as e:
            self.connected = False
            self.last_error = str(e)
            raise

    def barrier(self) -> None:
        """Return once every job queued before it (an operation in flight) has finished."""
        self.conn.owner.call(lambda: None)

    # -- polling (a worker thread) -------------------------------------------------------------
    def poll(self) -> PollResult:
        from tpmtop.tpm.handles import list_handles
        from tpmtop.tpm.identity import read_variable

        def job(t):
            if self.identity is None:
                self.identity = self.conn.identity()
            # The recorder's last command now: the list is as of it (no other job runs meanwhile).
            return list_handles(t, self.recorder.owned_handles()), read_variable(t), self.recorder.total

        entries, var, seq = self.on_tpm(job, origin="poll")
        return PollResult(entries, var, time.monotonic(), seq)

    def reconnect(self) -> None:
        if self.stopping.is_set():
            return
        self.on_tpm(self._reconnect_job)

    def _reconnect_job(self, _t) -> None:
        self.conn.reconnect()
        # The old engine's sessions and null key died with the TPM; never flush "its"
        # handles on the new one (they could be someone else's).
        w, self.workload = self.workload, None
        self.connected = True
        self.last_error = None
        # A TPM that comes back has been through TPM2_Startup: a new null seed, a new life.
        why = "the TPM restarted (it answers again after it stopped)"
        acc = w.accounts if w is not None else self._old_accounts
        if w is not None:
            self.periods.extend(w.periods)
        self._old_accounts = {}
        self._end_period(acc, why)
        self.recorder.mark(f"reconnected: {why}")

    # -- the workload (its own worker thread) ---------------------------------------------------
    def workload_loop(self, cancelled) -> None:
        """Run operations until ``cancelled()`` or stopping, ``self.rate`` per second on average,
        in bursts (:func:`burst_size`). Errors are reported through state (``workload_error``)
        and the loop goes on; a lost TPM ends the loop (the poller reconnects and restarts it).

        Why bursts: an operation that starts after a 10 ms sleep pays the host's and the
        simulator's wake-up (~130 µs here), which dwarfs a one-command ``none`` operation and
        made the live "vs none" ratio read x8 where ``bench`` reads x23. Back to back, the
        operations of a burst run warm, as in ``bench``; only the first of each burst pays the
        wake-up, so with bursts of >= 4 the p50 shown is the warm one at every rate."""
        next_t = time.perf_counter()
        while not cancelled() and not self.stopping.is_set():
            if not self.running or not self.connected:
                self.resume.wait(0.2)
                next_t = time.perf_counter()
                continue
            rate = self.rate
            n = burst_size(rate)
            self.step(n)
            if rate > 0:
                next_t += n / rate
                delay = next_t - time.perf_counter()
                if delay > 0:
                    self.stopping.wait(delay)
                elif delay < -1.0:
                    next_t = time.perf_counter()  # fell behind (slow TPM): don't burst to catch up
            else:
                # Unpaced, this thread is pure Python between round trips and would hold the
                # GIL for whole switch intervals (5 ms); yielding keeps keys responsive.
                time.sleep(0)

    def pacing(self) -> dict:
        """How the workload is paced now (shown in the header, written into captures)."""
        return pacing_json(self.rate)

    def step(self, n: int = 1) -> None:
        """Up to ``n`` operations back to back as one job on the TPM's owner thread (a burst):
        no thread hand-off between them, so each runs warm. A job ends after BURST_JOB_S even
        if the burst is not done, so a poll or a key's action never waits behind a slow chip's
        whole burst (slb9670: 150 ms per operation)."""
        if self.read_only:
            return
        try:
            if not self.on_tpm(self._burst_job, n, origin="workload"):
                return
            self.errors_in_row = 0
            self.workload_error = None
        except TpmConnectionError:
            raise
        except TpmError as e:
            what = SLOTS_FULL.get(e.rc or 0)
            if what is None:
                self._workload_failed(str(e))
                return
            self._workload_failed(f"{e}. The workload is paused: in the Handles panel select a handle "
                                  "tpmtop did not create, press f to flush it (it asks first), then space to resume",
                                  pause=f"paused: TPM {what} full, see Handles")
        except TpmtopError as e:
            self._workload_failed(str(e))
        except Exception as e:  # a TSS2_Exception from ESAPI, or a bug in the engine
            self._workload_failed(f"{type(e).__name__}: {e}")

    def _burst_job(self, t, n: int) -> int:
        """On the owner thread: operations until ``n`` ran, one failed to run (a reset, paused,
        stopping) or BURST_JOB_S passed. Returns how many ran; an error propagates."""
        deadline = time.perf_counter() + BURST_JOB_S
        done = 0
        while done < n and not self.stopping.is_set():
            if not self._step_job(t):
                break
            done += 1
            if time.perf_counter() >= deadline:
                break
        return done

    def _step_job(self, _t) -> bool:
        """One workload operation, on the owner thread. False: nothing ran, or a reset."""
        if not self.running:
            return False
        w = self._workload()
        if w is None:
            return False
        try:
            total_ns = w.run_one()
            self.timeline.append((time.monotonic(), w.engine_name, w.mode, w.op, total_ns))
            self.rates_run.setdefault((w.engine_name, w.mode, w.op), set()).add(self.rate)
        except NullNameChanged as e:
            # The TPM was reset (new null seed) or someone interferes. The engine marks the
            # recorder and starts a new period; sessions are set up again on the next
            # operation. Not an error streak: the workload goes on.
            w.recover_from_reset(str(e))
            self.periods.extend(w.periods)
            del w.periods[:]
            self.boundaries.append((time.time(), "the TPM was reset (its null primary's name changed)"))
            return False
        return True

    def _workload_failed(self, message: str, pause: str | None = None) -> None:
        self.workload_error = message
        self.errors_in_row += 1
        self._drop_workload()
        if pause is None and self.errors_in_row >= MAX_CONSECUTIVE_ERRORS:
            pause = f"paused after {self.errors_in_row} failed operations in a row"
        if pause is not None:
            self.set_running(False)
            self.pause_reason = pause

    def _end_period(self, accounts: dict, why: str) -> None:
        done = {k: a for k, a in accounts.items() if getattr(a, "ops", 0)}
        if done:
            self.periods.append(done)
        self.boundaries.append((time.time(), why))

    def _workload(self):
        if self.workload is None:
            from tpmtop.sessions.workload import (
                Workload,  # imported here: replay never needs it
            )

            self.workload = Workload(self.conn, engine=self.engine, mode=self.mode, op=self.op, pcr=self.pcr)
            self._accounts_from_old()
        else:
            w = self.workload
            if (w.engine_name, w.mode, w.op) != (self.engine, self.mode, self.op):
                w.set(engine=self.engine, mode=self.mode, op=self.op)
        return self.workload

    def _drop_workload(self) -> None:
        """Close the engine (flushing its handles) while the TPM is there; keep its accounts."""
        w, self.workload = self.workload, None
        if w is None:
            return
        # Not self.accounts(): the workload is already detached, and that read would return the
        # (empty) old accounts, so F (flush ours) wiped the Modes comparison.
        self._old_accounts = {**self._old_accounts, **dict(getattr(w, "accounts", None) or {})}
        self.periods.extend(w.periods)  # earlier TPM lives stay apart from the accounts merged back
        del w.periods[:]
        if self.connected:
            try:
                w.close()
            except Exception:
                pass

    def _accounts_from_old(self) -> None:
        # A new engine after an error or a reconnect starts with empty accounts; merge the old
        # ones in so the mode comparison keeps what this sitting measured.
        old = self._old_accounts
        if not old:
            return
        self._old_accounts = {}
        new = getattr(self.workload, "accounts", None)
        if isinstance(new, dict):
            for k, v in old.items():
                new.setdefault(k, v)

    def accounts(self) -> dict:
        w = self.workload
        acc = getattr(w, "accounts", None) if w is not None else None
        return dict(acc) if acc else dict(self._old_accounts)

    def set_running(self, running: bool) -> None:
        self.running = running and not self.read_only
        if self.running:
            self.pause_reason = None
            self.errors_in_row = 0  # the operator resumed: a fresh streak
            self.resume.set()
        else:
            self.resume.clear()

    def set_rate_step(self, direction: int) -> float:
        try:
            i = RATES.index(self.rate)
        except ValueError:
            i = min(range(len(RATES)), key=lambda k: abs((RATES[k] or 1e9) - self.rate))
        self.rate = RATES[max(0, min(len(RATES) - 1, i + direction))]
        return self.rate

    def choose(self, engine: str | None = None, mode: str | None = None, op: str | None = None) -> bool:
        """Takes effect before the next operation (the engine tears down kept sessions)."""
        self.engine = engine or self.engine
        self.mode = mode or self.mode
        self.op = op or self.op
        return True

    # -- user actions (worker threads) -----------------------------------------------------------
    def flush(self, handle: int) -> None:
        from tpmtop.tpm.handles import flush

        if self.read_only:
            raise UsageError("--read-only: refusing to flush")
        self.on_tpm(flush, handle)
        self.recorder.forget_handle(handle)

    def inspect(self, handle: int, kind: str, ours: bool) -> tuple[str, list[tuple[str, str]]]:
        """What the TPM says about ``handle`` (ReadPublic) and what the wire showed: read-only,
        allowed with --read-only (it changes nothing)."""
        from tpmtop.sources.inspect import describe

        return self.on_tpm(lambda t: describe(handle, kind, ours, t, self.recorder))

    def flush_ours(self) -> list[int]:
        """Close the engine (which flushes every handle it made), then flush whatever else
        tpmtop created that the TPM still lists."""
        if self.read_only:
            raise UsageError("--read-only: refusing to flush")
        return self.on_tpm(self._flush_ours_job)

    def _flush_ours_job(self, t) -> list[int]:
        # All of it in one job: once it returns, the workload's next job may start a session
        # that gets the same handle again (swtpm hands out 0x02000000 first), so "ours before,
        # not ours after" must be judged before any other job runs.
        from tpmtop.tpm.handles import FLUSHABLE, flush, list_handles

        before = self.recorder.owned_handles()
        done: list[int] = []
        self._drop_workload()  # the engine flushes what it made
        listed = {e.handle for e in list_handles(t, self.recorder.owned_handles())}
        for h in sorted(self.recorder.owned_handles() & listed):
            if h >> 24 in FLUSHABLE:
                try:
                    flush(t, h)
                except TpmtopError:
                    continue
                self.recorder.forget_handle(h)
                done.append(h)
        return sorted(set(done) | (before - self.recorder.owned_handles()))

    def reset_stats(self) -> None:
        self.recorder.reset_stats()
        w = self.workload
        acc = getattr(w, "accounts", None) if w is not None else None
        if isinstance(acc, dict):
            acc.clear()
        self._old_accounts = {}
        self.periods = []
        self.rates_run = {}
        self.timeline.clear()

    def capture(self, max_events: int = 20_000) -> dict:
        """The ``tpmtop bench --json`` contract (the same builder,
        ``tpmtop.capture.build_capture``), with the latest events so that ``tpmtop replay``
        can show the command stream too."""
        from tpmtop.capture import build_capture

        def job(_t):  # on the owner thread: the engine's accounts are consistent between operations
            accounts = [a for a in self.accounts().values() if a.ops]
            periods = [[a for a in p.values() if a.ops] for p in self.periods]
            events = [e for e in self.recorder.events(max_events) if e.origin == "workload"]
            if self.identity is None:
                raise TpmtopError("nothing to export yet: the TPM has not answered")
            # Each run then carries its period, and the recorder's marks say when and why.
            return build_capture(self.conn, accounts, events=events, periods=periods or None)

        cap = self.on_tpm(job, check_stopping=False)
        cap["pacing"] = self.pacing()
        for run in cap["runs"]:
            rates = self.rates_run.get((run["engine"], run["mode"], run["op"]))
            if rates:
                run["pacing"] = [pacing_json(r) for r in sorted(rates, key=lambda r: r or float("inf"))]
        return cap

    def tpm_json(self) -> dict:
        ident = self.identity
        d = {"tcti": self.tcti, "simulated": self.simulated}
        if self.profile:
            d["profile"] = self.profile
        if ident is not None:
            d |= {"manufacturer": ident.manufacturer, "vendor": ident.vendor, "firmware": ident.firmware}
        return d

    # -- the end ---------------------------------------------------------------------------------
    def close(self, timeout: float = 10.0) -> None:
        """Stop the workload, flush the engine's handles, close the TPM (stops a private swtpm).
        Idempotent: the exit watchdog and the normal path may both call it."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self.running = False
        self.resume.set()  # wake a paused loop so it sees `stopping`
        self.stopping.set()

        def job():  # queued behind an operation in flight, which finishes first
            w, self.workload = self.workload, None
            if w is not None and self.connected:
                w.close()

        try:
            if self.conn.owner is not None:
                self.conn.owner.submit(job).result(timeout)
        except (TpmtopError, TimeoutError):
            # A TPM that is gone or silent: give up on flushing after the time-out rather than
            # hang the exit. Anything else is a bug and must not be swallowed (it once hid a
            # clean-up that never ran: tests/test_tui_quit.py).
            pass
        finally:
            self.conn.close()


def export_capture(cap: dict, directory: str | os.PathLike = ".", now: _dt.datetime | None = None) -> Path:
    """Write ``tpmtop-YYYYmmdd-HHMMSS.json`` atomically; never overwrite an earlier export."""
    now = now or _dt.datetime.now()
    d = Path(directory)
    base = f"tpmtop-{now:%Y%m%d-%H%M%S}"
    path = d / f"{base}.json"
    n = 1
    while path.exists():
        n += 1
        path = d / f"{base}-{n}.json"
    # Validated against the capture schema and written atomically (temp file, fsync, rename):
    # the one writer every capture goes through, so `tpmtop replay` reads what it wrote. If
    # the folder cannot take it after all, the capture is kept in a fallback file (named in
    # the OutputError's message) rather than lost.
    from tpmtop.capture import write_capture

    write_capture(path, cap, keep=True)
    return path.resolve()

