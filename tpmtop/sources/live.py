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
from dataclasses import dataclass
from pathlib import Path

from tpm2_pytss.constants import TPM2_RC

from tpmtop.errors import NullNameChanged, TpmConnectionError, TpmError, TpmtopError, UsageError

RATES = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 0.0)  # 0: unpaced
MAX_CONSECUTIVE_ERRORS = 3
# A full TPM (object slots, session slots, session handles): retrying cannot help until
# someone frees a slot, and every retry is one more failed command on the operator's TPM.
SLOTS_FULL = {int(TPM2_RC.OBJECT_MEMORY): "object slots", int(TPM2_RC.SESSION_MEMORY): "session slots",
              int(TPM2_RC.SESSION_HANDLES): "session handles"}


@dataclass
class PollResult:
    entries: list  # tpmtop.tpm.handles.HandleEntry
    var: dict[str, int]
    t: float  # monotonic time of the poll


class LiveSource:
    kind = "live"
    needs_tpm = True

    def __init__(self, conn, *, read_only: bool = False, poll_interval: float | None = None,
                 rate: float = 100.0, start_running: bool | None = None, engine: str = "native",
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
        self._close_lock = threading.Lock()
        self._closed = False

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
            return list_handles(t, self.recorder.owned_handles()), read_variable(t)

        entries, var = self.on_tpm(job, origin="poll")
        return PollResult(entries, var, time.monotonic())

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
        """Run operations until ``cancelled()`` or stopping; paced to ``self.rate``.
        Errors are reported through ``on_error`` style state (``workload_error``) and the
        loop goes on; a lost TPM ends the loop (the poller reconnects and restarts it)."""
        next_t = time.perf_counter()
        while not cancelled() and not self.stopping.is_set():
            if not self.running or not self.connected:
                self.resume.wait(0.2)
                next_t = time.perf_counter()
                continue
            self.step()
            if self.rate > 0:
                next_t += 1.0 / self.rate
                delay = next_t - time.perf_counter()
                if delay > 0:
                    self.stopping.wait(delay)
                elif delay < -1.0:
                    next_t = time.perf_counter()  # fell behind (slow TPM): don't burst to catch up
            else:
                # Unpaced, this thread is pure Python between round trips and would hold the
                # GIL for whole switch intervals (5 ms); yielding keeps keys responsive.
                time.sleep(0)

    def step(self) -> None:
        if self.read_only:
            return
        try:
            if not self.on_tpm(self._step_job, origin="workload"):
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

    def _step_job(self, _t) -> bool:
        """One workload operation, on the owner thread. False: nothing ran, or a reset."""
        if not self.running:
            return False
        w = self._workload()
        if w is None:
            return False
        try:
            w.run_one()
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
            from tpmtop.sessions.workload import Workload  # imported here: replay never needs it

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
        self._old_accounts = self.accounts()
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

    def choose(self, engine: str | None = None, mode: str | None = None, op: str | None = None) -> None:
        """Takes effect before the next operation (the engine tears down kept sessions)."""
        self.engine = engine or self.engine
        self.mode = mode or self.mode
        self.op = op or self.op

    # -- user actions (worker threads) -----------------------------------------------------------
    def flush(self, handle: int) -> None:
        from tpmtop.tpm.handles import flush

        if self.read_only:
            raise UsageError("--read-only: refusing to flush")
        self.on_tpm(flush, handle)
        self.recorder.forget_handle(handle)

    def flush_ours(self) -> list[int]:
        """Close the engine (which flushes every handle it made), then flush whatever else
        tpmtop created that the TPM still lists."""
        if self.read_only:
            raise UsageError("--read-only: refusing to flush")
        before = self.recorder.owned_handles()
        done = self.on_tpm(self._flush_ours_job)
        done += sorted((before - set(done)) - self.recorder.owned_handles())
        return sorted(set(done))

    def _flush_ours_job(self, t) -> list[int]:
        from tpmtop.tpm.handles import FLUSHABLE, flush, list_handles

        done: list[int] = []
        self._drop_workload()
        listed = {e.handle for e in list_handles(t, self.recorder.owned_handles())}
        for h in sorted(self.recorder.owned_handles() & listed):
            if h >> 24 in FLUSHABLE:
                try:
                    flush(t, h)
                except TpmtopError:
                    continue
                self.recorder.forget_handle(h)
                done.append(h)
        return done

    def reset_stats(self) -> None:
        self.recorder.reset_stats()
        w = self.workload
        acc = getattr(w, "accounts", None) if w is not None else None
        if isinstance(acc, dict):
            acc.clear()
        self._old_accounts = {}
        self.periods = []

    def capture(self, max_events: int = 20_000) -> dict:
        """The ``tpmtop bench --json`` contract (``tpmtop.bench.capture_dict``), with the latest
        events so that ``tpmtop replay`` can show the command stream too."""
        from tpmtop.bench import capture_dict

        def job(_t):  # on the owner thread: the engine's accounts are consistent between operations
            accounts = [a for a in self.accounts().values() if a.ops]
            periods = [[a for a in p.values() if a.ops] for p in self.periods]
            events = [e for e in self.recorder.events(max_events) if e.origin == "workload"]
            if self.identity is None:
                raise TpmtopError("nothing to export yet: the TPM has not answered")
            # Each run then carries its period, and the recorder's marks say when and why.
            return capture_dict(self.conn, accounts, events=events, periods=periods or None)

        return self.on_tpm(job, check_stopping=False)

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

        def job(_t):  # queued behind an operation in flight, which finishes first
            w, self.workload = self.workload, None
            if w is not None and self.connected:
                w.close()

        try:
            if self.conn.owner is not None:
                self.conn.owner.submit(job).result(timeout)
        except Exception:
            pass  # a silent TPM: give up on flushing after the time-out rather than hang the exit
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
    # the one writer every capture goes through, so `tpmtop replay` reads what it wrote.
    from tpmtop.capture import write_capture

    write_capture(path, cap)
    return path.resolve()

