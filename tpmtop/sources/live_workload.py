"""The live source's workload: its loop (paced in bursts), its pauses, the accounts it keeps
across engines and TPM lives, and what m/e/o, space and +/- change. A part of
:class:`tpmtop.sources.live.LiveSource` (which owns the connection and the poller). No Textual here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tpmtop.errors import NullNameChanged, TpmConnectionError, TpmError, TpmtopError
from tpmtop.sessions.modes import Mode
from tpmtop.sources import pacing
from tpmtop.sources.gate import UiGate
from tpmtop.sources.pacing import BURST_JOB_S, RATES, burst_size, pacing_json
from tpmtop.sources.protocol import PauseCause, PauseReason
from tpmtop.sources.timeline import OpsTimeline
from tpmtop.tpm import names
from tpmtop.tpm.exchange import Origin

MAX_CONSECUTIVE_ERRORS = 3
# A full TPM (object slots, session slots, session handles): retrying cannot help until
# someone frees a slot, and every retry is one more failed command on the operator's TPM.
SLOTS_FULL = frozenset({names.RC_OBJECT_MEMORY, names.RC_SESSION_MEMORY, names.RC_SESSION_HANDLES})


class TpmLink:
    """The live source's connection as its parts share it: the TPM's owner thread, whether the
    TPM answers, and the stop of the whole source. Owned by :class:`tpmtop.sources.live.LiveSource`,
    handed to its :class:`WorkloadDriver`."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn  # tpmtop.tpm.connection.TpmConnection
        self.connected = True
        self.last_error: str | None = None
        self.stopping = threading.Event()

    def run_on_owner(self, fn: Callable[..., Any], *args: Any, origin: str = Origin.USER,
                     check_stopping: bool = True) -> Any:
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

    def lost(self, error: str) -> None:
        """A worker found the TPM gone (the poller re-arms and reconnects)."""
        self.connected = False
        self.last_error = error


class WorkloadDriver:
    """The live source's workload: a part the source owns (``LiveSource.driver``). It runs
    operations through the source's :class:`TpmLink`, and appends the TPM's lives it sees end
    (a reset) to the source's ``periods`` and ``boundaries``; its timeline and baseline counts
    are the source's too (shared objects, read by the view-model)."""

    def __init__(self, link: TpmLink, *, read_only: bool, running: bool, rate: float, engine: str, mode: str,
                 op: str, pcr: int, periods: list[dict[Any, Any]], boundaries: list[tuple[float, str]],
                 timeline: OpsTimeline, baseline_ops: dict[tuple[str, str], int]) -> None:
        self.link = link
        self.read_only = read_only
        self.running = running
        self.rate = rate
        self.engine, self.mode, self.op, self.pcr = engine, mode, op, pcr
        self.workload: Any = None  # tpmtop.sessions.workload.Workload, made at the first operation
        self.workload_error: str | None = None
        self.pause_reason: PauseReason | None = None  # why the workload paused itself (header)
        self.errors_in_row = 0
        # Accounts of earlier TPM lives (a reset, or a restart found by reconnecting), oldest
        # first: never merged with the current one, so no panel mixes two TPMs' numbers.
        self.periods = periods
        self.boundaries = boundaries  # (time.time(), why) of each new TPM life
        self.resume = threading.Event()
        self.gate = UiGate()  # the dashboard holds the workload here while it draws
        if self.running:
            self.resume.set()
        self._old_accounts: dict[Any, Any] = {}
        # (engine, mode, op) -> every rate its operations ran at: a capture says so per run.
        self.rates_run: dict[tuple[str, str, str], set[float]] = {}
        # (engine, op) -> `none` operations run as the interleaved baseline (the Modes panel says so)
        self.baseline_ops = baseline_ops
        # the running choice's operation time and its baseline's, since the last reset
        self._mode_s = self._baseline_s = 0.0
        self.timeline = timeline  # operation p50 per second: the Modes panel's time series

    @property
    def stopping(self) -> threading.Event:
        return self.link.stopping

    @property
    def connected(self) -> bool:
        return self.link.connected

    # -- the workload (its own worker thread) ---------------------------------------------------
    def workload_loop(self, cancelled: Callable[[], bool]) -> None:
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
            self.gate.wait(self.stopping)
            if self.stopping.is_set():
                break
            rate = self.rate
            n = burst_size(rate)
            self._burst(n)
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

    def _burst(self, n: int) -> None:
        """``n`` operations back to back. A burst the dashboard holds (a refresh due, a key) runs
        its rest once the screen is drawn: dropped, it cost a third of the operations at the
        default pacing in one run, the refreshes falling due in the bursts every time."""
        while n > 0:
            done, held = self.step(n)
            n -= done
            if not held or self.stopping.is_set():
                return
            self.gate.wait(self.stopping)
            if not self.running or not self.connected:
                return

    def pacing(self) -> dict[str, Any]:
        """How the workload is paced now (shown in the header, written into captures)."""
        return pacing_json(self.rate)

    def step(self, n: int = 1) -> tuple[int, bool]:
        """Up to ``n`` operations back to back as one job on the TPM's owner thread (a burst):
        no thread hand-off between them, so each runs warm. A job ends after BURST_JOB_S even
        if the burst is not done, so a poll or a key's action never waits behind a slow chip's
        whole burst (slb9670: 150 ms per operation). Returns how many ran, and whether the
        dashboard's hold (tpmtop.sources.gate) ended the job."""
        if self.read_only:
            return 0, False
        try:
            done, held = self.link.run_on_owner(self._burst_job, n, origin=Origin.WORKLOAD)
        except TpmConnectionError:
            raise
        except TpmError as e:
            if (e.rc or 0) not in SLOTS_FULL:
                self._workload_failed(str(e))
            else:
                self._workload_failed(f"{e}. The workload is paused: in the Handles panel select a handle "
                                      "tpmtop did not create, press f to flush it (it asks first), then space to "
                                      "resume", pause=PauseReason(PauseCause.SLOTS_FULL, rc=e.rc))
            return 0, False
        except TpmtopError as e:
            self._workload_failed(str(e))
            return 0, False
        except Exception as e:  # a TSS2_Exception from ESAPI, or a bug in the engine
            self._workload_failed(f"{type(e).__name__}: {e}")
            return 0, False
        if done:
            self.errors_in_row = 0
            self.workload_error = None
        return done, held

    def _burst_job(self, t: Any, n: int) -> tuple[int, bool]:
        """On the owner thread: operations until ``n`` ran, one failed to run (a reset, paused,
        stopping), BURST_JOB_S passed or the dashboard holds the workload. Returns how many ran
        and whether the hold ended the job; an error propagates. While a mode other than
        `none` runs, short bursts of `none` operations are interleaved as its baseline."""
        now = time.perf_counter
        deadline = now() + BURST_JOB_S
        done = 0
        # Busy first, then the hold: a refresh holds first, then reads busy. Whichever of the
        # two threads comes second sees the other (the GIL orders them), so no operation
        # starts once a refresh has found the workload idle.
        self.gate.busy = True
        if self.gate.held():
            self.gate.busy = False
            return 0, True
        try:
            while done < n and not self.stopping.is_set():
                t0 = now()
                if not self._step_job(t):
                    break
                done += 1
                self._mode_s += now() - t0
                if self._baseline_due() and not self._baseline_one():
                    break
                if self.gate.held():
                    return done, True
                if now() >= deadline:
                    break
        finally:
            self.gate.busy = False
        return done, False

    def _baseline_due(self) -> bool:
        """A mode other than ``none`` runs, and its baseline is thin or has had less than its
        share of the mode's time."""
        w = self.workload
        if w is None or w.mode == Mode.NONE or self.stopping.is_set() or not self.running:
            return False
        acc = getattr(w, "accounts", {}).get((w.engine_name, Mode.NONE, w.op))
        if acc is None or acc.ops < pacing.BASELINE_WARM_OPS:
            return True
        return self._baseline_s < pacing.BASELINE_SHARE * self._mode_s

    def _baseline_one(self) -> bool:
        """A short burst of ``none`` operations right after one of the mode's own, in the same
        job: warm as theirs, on the same engine, op and TPM, and at the same moments of a
        shared machine as they are. The first follows the mode's operation; the others
        follow it back to back, as a kept session's extends follow each other, and past the
        burst's warm-up they are the basis of a kept session not yet run
        (tpmtop.sessions.accounting). The whole burst runs even past the job's BURST_JOB_S
        (a chip's: 8 × 6.4 ms on slb9670, once in about 17 of its 151-ms operations). Not in
        the per-second series (it follows the mode that runs); an error propagates as the
        mode's would. False: it did not run (a reset, stopping)."""
        w = self.workload
        if w is None or self.stopping.is_set():
            return False
        key = (w.engine_name, w.op)
        t0 = time.perf_counter()
        try:
            for i in range(pacing.BASELINE_BURST):
                if self.stopping.is_set():
                    break
                steady = i >= pacing.BASELINE_STEADY_FROM
                if not self._one(w, baseline=True, back_to_back=i > 0, steady=steady):
                    return False  # a reset: the job ends, as after the mode's own operation
                self.baseline_ops[key] = self.baseline_ops.get(key, 0) + 1
        finally:
            self._baseline_s += time.perf_counter() - t0
        return True

    def _step_job(self, _t: Any) -> bool:
        """One workload operation, on the owner thread. False: nothing ran, or a reset."""
        if not self.running:
            return False
        w = self._workload()
        if w is None:
            return False
        return self._one(w)

    def _one(self, w: Any, baseline: bool = False, back_to_back: bool = False, steady: bool = False) -> bool:
        try:
            if baseline:
                w.run_baseline(back_to_back, steady)
                return True
            total_ns = w.run_one()
            self.timeline.add(time.monotonic(), w.engine_name, w.mode, w.op, total_ns)
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

    def _workload_failed(self, message: str, pause: PauseReason | None = None) -> None:
        self.workload_error = message
        self.errors_in_row += 1
        self._drop_workload()
        if pause is None and self.errors_in_row >= MAX_CONSECUTIVE_ERRORS:
            pause = PauseReason(PauseCause.ERRORS, failed=self.errors_in_row)
        if pause is not None:
            self.set_running(False)
            self.pause_reason = pause

    def slot_freed(self) -> None:
        if not self.running and self.pause_reason is not None and self.pause_reason.cause is PauseCause.SLOTS_FULL:
            self.pause_reason = PauseReason(PauseCause.SLOT_FREED)

    def _end_period(self, accounts: dict[Any, Any], why: str) -> None:
        done = {k: a for k, a in accounts.items() if getattr(a, "ops", 0)}
        if done:
            self.periods.append(done)
        self.boundaries.append((time.time(), why))

    def _workload(self) -> Any:  # tpmtop.sessions.workload.Workload
        if self.workload is None:
            from tpmtop.sessions.workload import Workload  # imported here: replay never needs it

            self.workload = Workload(self.link.conn, engine=self.engine, mode=self.mode, op=self.op, pcr=self.pcr)
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
            # As a job on the TPM's owner: after a failed operation this runs on the workload's
            # thread, outside any job, and the engine's clean-up (list handles, flush) then
            # raced a poll on the fast path over the one connection — two commands in flight,
            # one answer taken by the wrong thread, the other thread waiting for ever. Inside a
            # job already (F's flush-ours) it runs in place.
            try:
                self.link.run_on_owner(lambda _t: w.close(), origin=Origin.WORKLOAD, check_stopping=False)
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

    def accounts(self) -> dict[tuple[str, str, str], Any]:
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
        if (engine or self.engine, mode or self.mode, op or self.op) != (self.engine, self.mode, self.op):
            self._mode_s = self._baseline_s = 0.0  # the baseline's share starts again with the new choice
        self.engine = engine or self.engine
        self.mode = mode or self.mode
        self.op = op or self.op
        return True

    def reset(self) -> None:
        """r: the accounts and what was measured start again (the shared timeline and baseline
        counts with them)."""
        w = self.workload
        acc = getattr(w, "accounts", None) if w is not None else None
        if isinstance(acc, dict):
            acc.clear()
        self._old_accounts = {}
        del self.periods[:]
        self.rates_run = {}
        self.baseline_ops.clear()
        self._mode_s = self._baseline_s = 0.0
        self.timeline.clear()

    def new_life(self, why: str) -> None:
        """The TPM came back (reconnected): the old engine's sessions and null key died with
        it, so its handles are never flushed on the new one (they could be someone else's);
        what it measured ends a period."""
        w, self.workload = self.workload, None
        acc = w.accounts if w is not None else self._old_accounts
        if w is not None:
            self.periods.extend(w.periods)
        self._old_accounts = {}
        self._end_period(acc, why)

    def stop(self) -> None:
        """The source closes: the loop ends, a paused or held one wakes to see it."""
        self.running = False
        self.resume.set()
        self.gate.open()

    def detach(self) -> Any:
        """The engine, taken out (the source closes it on the owner thread), or None."""
        w, self.workload = self.workload, None
        return w
