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

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from tpmtop.errors import TpmtopError, UsageError
from tpmtop.pcrs.live import log_readable
from tpmtop.sessions.modes import ENGINES, MODES, OPS, Engine, Mode, Op
from tpmtop.sources.gate import UiGate
from tpmtop.sources.live_workload import TpmLink, WorkloadDriver
from tpmtop.sources.luks import FIRST_LOOK_S, LuksReader
from tpmtop.sources.pacing import DEFAULT_RATE, baseline_pacing_json, burst_size, pacing_json
from tpmtop.sources.protocol import (
    Capabilities,
    HeaderInfo,
    LiveFacts,
    PauseReason,
    PollResult,
    SourceBase,
    SourceKind,
    SourceState,
    TpmName,
    UnlockReading,
)
from tpmtop.sources.runs import RunView
from tpmtop.sources.timings import PeriodFacts, TimingsView, command_timings
from tpmtop.tpm.exchange import Origin
from tpmtop.tpm.tcti import TargetKind

if TYPE_CHECKING:
    from tpmtop.pcrs.live import PcrSnapshot
    from tpmtop.recorder import Recorder
    from tpmtop.sources.inspect import HandleFacts
    from tpmtop.tpm.connection import TpmConnection
    from tpmtop.tpm.handles import HandleEntry


# The PCRs panel's reading: PCRs change on extends only, and each reading is ~3 PCR_Reads per
# bank in the stream; 10 s keeps it current without crowding the workload's commands.
PCRS_REFRESH_S = 10.0
SRK_SOON_S = 1.0  # at most this often while a token's SRK is still to be asked (a failing TPM is not hammered)


class LiveSource(SourceBase):
    """A TPM: polled for handles and slots, driven by a workload (its :class:`WorkloadDriver`,
    ``driver``), recorded command by command. The connection its parts share is ``link``."""

    pcrs_root = "/"  # where securityfs' event log and IMA list are read (a test's tree)

    def __init__(self, conn: TpmConnection, *, read_only: bool = False, poll_interval: float | None = None,
                 rate: float = DEFAULT_RATE, start_running: bool | None = None, engine: str = Engine.NATIVE,
                 mode: str = Mode.PER_COMMAND, op: str = Op.EXTEND, pcr: int = 16, profile_note: str | None = None,
                 proxy: Any = None, proxy_log: list[str] | None = None) -> None:
        """``proxy``: a started :class:`tpmtop.proxy.server.ProxyServer` on this connection
        (``--listen``), whose ``log`` appends to ``proxy_log``; the source stops it on close."""
        super().__init__()
        self.conn = conn
        self.link = TpmLink(conn)
        self.proxy = proxy
        self._last_var: dict[str, int] | None = None  # the latest poll's variable properties (Health)
        self.proxy_log = proxy_log if proxy_log is not None else []
        self.recorder: Recorder = cast("Recorder", conn.recorder)  # open_tpm always attaches one
        self.read_only = read_only
        self.simulated = bool(conn.simulated)
        self.simulated_reason = conn.simulated_reason
        # The observer effect concerns a kernel's TPM: a device node, not a simulator on a socket.
        self.kernel_device = conn.target.kind is TargetKind.DEVICE
        self.poll_interval = poll_interval or (1.0 if self.simulated else 5.0)
        if start_running is None:
            start_running = self.simulated  # a real TPM's PCR 16 is not ours to change unasked
        self.driver = WorkloadDriver(self.link, read_only=read_only, running=bool(start_running) and not read_only,
                                     rate=rate, engine=engine, mode=mode, op=op, pcr=pcr, periods=self.periods,
                                     boundaries=self.boundaries, timeline=self.timeline,
                                     baseline_ops=self.baseline_ops)
        self.identity = None
        self.tcti = conn.target.tcti
        # Set by tpmtop.profiles.apply.apply_profile: every latency shown is then the profile's.
        self.profile: str | None = getattr(conn, "profile_name", None)
        self.profile_note = profile_note  # the header's tooltip (None: it names the profile)
        self._close_lock = threading.Lock()
        self._closed = False
        # The Unlock panel's devices: looked for now, before the dashboard reads caps on the
        # screen's thread (discovery opens every block device), and waited for at most FIRST_LOOK_S.
        self.luks = LuksReader(lambda: self.unlock_devices)
        self.luks.refresh()
        self._luks_found = self.luks.found(FIRST_LOOK_S)

    # -- the workload's state, as the source's roles name it (the driver owns it) -----------------
    @property
    def engine(self) -> str:  # type: ignore[override]
        return self.driver.engine

    @property
    def mode(self) -> str:
        return self.driver.mode

    @property
    def op(self) -> str:  # type: ignore[override]
        return self.driver.op

    @property
    def running(self) -> bool:  # type: ignore[override]
        return self.driver.running

    @property
    def rate(self) -> float:
        return self.driver.rate

    @rate.setter
    def rate(self, rate: float) -> None:
        self.driver.rate = rate

    @property
    def workload(self) -> Any:  # tpmtop.sessions.workload.Workload, or None
        return self.driver.workload

    @property
    def workload_error(self) -> str | None:  # type: ignore[override]
        return self.driver.workload_error

    @property
    def pause_reason(self) -> PauseReason | None:  # type: ignore[override]
        return self.driver.pause_reason

    @property
    def rates_run(self) -> dict[tuple[str, str, str], set[float]]:
        return self.driver.rates_run

    @property
    def connected(self) -> bool:  # type: ignore[override]
        return self.link.connected

    @property
    def last_error(self) -> str | None:
        return self.link.last_error

    @property
    def stopping(self) -> threading.Event:
        return self.link.stopping

    def workload_loop(self, cancelled: Callable[[], bool]) -> None:
        self.driver.workload_loop(cancelled)

    def step(self, n: int = 1) -> tuple[int, bool]:
        return self.driver.step(n)

    def _step_job(self, t: Any) -> bool:
        return self.driver._step_job(t)

    def set_running(self, running: bool) -> None:
        self.driver.set_running(running)

    def set_rate_step(self, direction: int) -> float:
        return self.driver.set_rate_step(direction)

    def choose(self, engine: str | None = None, mode: str | None = None, op: str | None = None) -> bool:
        return self.driver.choose(engine, mode, op)

    def slot_freed(self) -> None:
        self.driver.slot_freed()

    def lost(self, error: str) -> None:
        self.link.lost(error)

    def accounts(self) -> dict[tuple[str, str, str], Any]:
        return self.driver.accounts()

    def pacing(self) -> dict[str, Any]:
        return self.driver.pacing()

    # -- what the dashboard reads (tpmtop.sources.protocol.Source) ------------------------------
    @property
    def gate(self) -> UiGate:
        return self.driver.gate

    @property
    def caps(self) -> Capabilities:
        ro = self.read_only
        return Capabilities(SourceKind.LIVE, live=True, handles=True, timings=True, workload=True, changes_tpm=not ro,
                            selects_runs=not ro, export=True, sysfs=self.kernel_device,
                            clients=self.proxy is not None or self.kernel_device,
                            # the PCRs panel only where there is a boot's event log to replay (root reads it)
                            pcrs=log_readable(self.pcrs_root), health=True, unlock=self._luks_here(),
                            why_not="--read-only: tpmtop sends nothing that changes the TPM" if ro else "")

    def _luks_here(self) -> bool:
        """The Unlock panel only where there is a LUKS2 device to judge (the devices given, or
        /etc/crypttab's and the block devices with a LUKS2 header: looked for once, at the start)."""
        return bool(self.unlock_devices) or self._luks_found

    def state(self) -> SourceState:
        if not self.connected:
            return SourceState.DISCONNECTED
        if self.read_only:
            return SourceState.READ_ONLY
        return SourceState.RUNNING if self.running else SourceState.PAUSED

    def header(self) -> HeaderInfo:
        st = self.state()
        ident = self.identity
        name = TpmName(ident.manufacturer, ident.vendor, ident.firmware) if ident else None
        live = LiveFacts(rate=self.rate, burst=burst_size(self.rate), poll_s=self.poll_interval,
                         last_error=self.last_error if st is SourceState.DISCONNECTED else None,
                         period=len(self.boundaries) + 1,
                         pause=self.pause_reason if st is SourceState.PAUSED else None, profile_note=self.profile_note)
        return HeaderInfo(state=st, tcti=self.tcti, simulated=self.simulated, engine=self.engine, mode=self.mode,
                          op=self.op, name=name, simulated_reason=self.simulated_reason, profile=self.profile,
                          facts=live)

    def runs(self) -> list[RunView]:
        from tpmtop.sources.runs import runs_from_accounts

        return runs_from_accounts(self.accounts())

    def timings(self, runs: list[RunView] | None = None) -> TimingsView:
        """The current (engine, mode, op) run: its operation rows and its commands, as replay
        shows a capture's run — never commands of other modes beside this mode's operations."""
        runs = self.runs() if runs is None else runs
        current = next((r for r in runs if r.key == (self.engine, self.mode, self.op)), None)
        period = PeriodFacts(self.boundaries[-1][0], len(self.periods), self.earlier_ops()) if self.boundaries else None
        if current is None:
            # nothing of this run yet: what went on the wire
            return TimingsView(commands=command_timings(self.recorder.command_stats(None)), engine=self.engine,
                               mode=self.mode, op=self.op, period=period)
        # the run's commands, with the newest samples (sparkline, last) from the wire. Error
        # counts: the view-model's, of this run and this TPM period only (the wire's count is
        # every run's: an error one mode met once showed in every later run).
        return TimingsView(current, recent=command_timings(self.recorder.command_stats("workload")),
                           engine=self.engine, mode=self.mode, op=self.op, period=period)

    def values(self, what: str) -> list[str]:
        return list({"engine": ENGINES, "mode": MODES, "op": OPS}[what])

    # -- the TPM's owner thread -------------------------------------------------------------
    def run_on_owner(self, fn: Callable[..., Any], *args: Any, origin: str = Origin.USER,
                     check_stopping: bool = True) -> Any:
        """Run ``fn(transport, *args)`` as one job on the TPM's owner thread (tpmtop.sources.live_workload.TpmLink)."""
        return self.link.run_on_owner(fn, *args, origin=origin, check_stopping=check_stopping)

    def barrier(self) -> None:
        """Return once every job queued before it (an operation in flight) has finished."""
        owner = self.conn.owner
        if owner is not None:
            owner.call(lambda: None)

    # -- the PCRs panel ----------------------------------------------------------------------------
    def pcr_report(self) -> PcrSnapshot | None:
        """The latest PCR snapshot (tpmtop.pcrs.live), read again in the background at most
        every PCRS_REFRESH_S: 3 PCR_Reads per bank on the owner thread (read-only, no
        authorization), and the event log parsed, never on the screen's thread."""
        self._refresh_pcrs()
        return getattr(self, "_pcrs", None)

    def unlock_reading(self) -> UnlockReading | None:
        """The LUKS2 tokens judged against the PCRs panel's reading (the same PCR_Reads, judged
        as each arrives); the headers read again in the background (tpmtop.sources.luks)."""
        self._refresh_pcrs()
        self.luks.refresh()
        return self.luks.reading()

    def _refresh_pcrs(self) -> None:
        now = time.monotonic()
        since = now - getattr(self, "_pcrs_at", -PCRS_REFRESH_S)
        # sooner when LUKS2 headers arrived naming an SRK the last reading did not ask about
        stale = since >= PCRS_REFRESH_S or (since >= SRK_SOON_S and self.luks.needs_srk())
        if stale and not getattr(self, "_pcrs_busy", False) and not self.stopping.is_set():
            self._pcrs_busy, self._pcrs_at = True, now
            threading.Thread(target=self._read_pcrs, name="tpmtop-pcrs", daemon=True).start()

    def _read_pcrs(self) -> None:
        from tpmtop.pcrs.live import snapshot
        from tpmtop.pcrs.tpmread import read_all

        try:
            values = self.run_on_owner(read_all, origin=Origin.POLL)
            handles = self.luks.srk_handles()
            srk = None
            if handles:
                from tpmtop.unlock.srk import srk_names

                srk = self.run_on_owner(srk_names, handles, origin=Origin.POLL)
            self.luks.judge(values, srk)
            self._pcrs = snapshot(values, self.pcrs_root)
        except Exception:  # a lost TPM says so in the header; the panel keeps its last reading
            pass
        finally:
            self._pcrs_busy = False

    # -- polling (a worker thread) -------------------------------------------------------------
    def poll(self) -> PollResult:
        from tpmtop.tpm.handles import list_handles
        from tpmtop.tpm.identity import read_variable

        def job(t: Any) -> tuple[list[HandleEntry], dict[str, int], int]:
            if self.identity is None:
                self.identity = self.conn.identity()
            # The recorder's last command now: the list is as of it (no other job runs meanwhile).
            return list_handles(t, self.recorder.owned_handles()), read_variable(t), self.recorder.total

        entries, var, seq = self.run_on_owner(job, origin=Origin.POLL)
        self._last_var = var
        return PollResult(entries, var, time.monotonic(), seq)

    def da_properties(self) -> dict[str, int] | None:
        return self._last_var

    def reconnect(self) -> None:
        if self.stopping.is_set():
            return
        self.run_on_owner(self._reconnect_job)

    def _reconnect_job(self, _t: Any) -> None:
        lost = self.last_error or "the TPM stopped answering"
        swtpm = self.conn.reconnect()
        self.link.connected = True
        self.link.last_error = None
        # A TPM that comes back has been through TPM2_Startup: a new null seed, a new life.
        # Said with its cause: a new period at start-up once went unexplained (issue 24).
        if swtpm:
            why = f"tpmtop started a new private swtpm after: {lost} ({swtpm})"
        else:
            why = f"the TPM restarted (it answers again after: {lost})"
        self.driver.new_life(why)
        self.recorder.mark(f"reconnected: {why}")

    # -- user actions (worker threads) -----------------------------------------------------------
    def flush(self, handle: int) -> None:
        from tpmtop.tpm.handles import flush

        if self.read_only:
            raise UsageError("--read-only: refusing to flush")
        self.run_on_owner(flush, handle)
        self.recorder.forget_handle(handle)

    def inspect(self, handle: int, kind: str, ours: bool, created_by: str | None = None) -> HandleFacts:
        """What the TPM says about ``handle`` (ReadPublic) and what the wire showed: read-only,
        allowed with --read-only (it changes nothing)."""
        from tpmtop.sources.inspect import describe

        result: HandleFacts = self.run_on_owner(lambda t: describe(handle, kind, ours, t, self.recorder, created_by))
        return result

    def flush_ours(self) -> list[int]:
        """Close the engine (which flushes every handle it made), then flush whatever else
        tpmtop created that the TPM still lists."""
        if self.read_only:
            raise UsageError("--read-only: refusing to flush")
        done: list[int] = self.run_on_owner(self._flush_ours_job)
        return done

    def _flush_ours_job(self, t: Any) -> list[int]:
        # All of it in one job: once it returns, the workload's next job may start a session
        # that gets the same handle again (swtpm hands out 0x02000000 first), so "ours before,
        # not ours after" must be judged before any other job runs.
        from tpmtop.tpm.handles import FLUSHABLE, flush, list_handles

        before = self.recorder.owned_handles()
        done: list[int] = []
        self.driver._drop_workload()  # the engine flushes what it made
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
        self.driver.reset()

    def capture(self, max_events: int = 20_000) -> dict[str, Any]:
        """The ``tpmtop bench --json`` contract (the same builder,
        ``tpmtop.capture.build_capture``), with the latest events so that ``tpmtop replay``
        can show the command stream too."""
        from tpmtop.capture import build_capture

        # On the owner thread: the engine's accounts are consistent between operations.
        def job(_t: Any) -> dict[str, Any]:
            accounts = [a for a in self.accounts().values() if a.ops]
            periods = [[a for a in p.values() if a.ops] for p in self.periods]
            events = [e for e in self.recorder.events(max_events) if e.origin in (Origin.WORKLOAD, Origin.BASELINE)]
            if self.identity is None:
                raise TpmtopError("nothing to export yet: the TPM has not answered")
            # Each run then carries its period, and the recorder's marks say when and why.
            return build_capture(self.conn, accounts, events=events, periods=periods or None)

        cap: dict[str, Any] = self.run_on_owner(job, check_stopping=False)
        cap["pacing"] = self.pacing()
        for run in cap["runs"]:
            rates = self.rates_run.get((run["engine"], run["mode"], run["op"]))
            if rates:
                run["pacing"] = [pacing_json(r) for r in sorted(rates, key=lambda r: r or float("inf"))]
            interleaved = self.baseline_ops.get((run["engine"], run["op"])) if run["mode"] == Mode.NONE else None
            if interleaved:
                run.setdefault("pacing", []).append(baseline_pacing_json(interleaved))
        return cap

    def tpm_json(self) -> dict[str, Any]:
        ident = self.identity
        d: dict[str, Any] = {"tcti": self.tcti, "simulated": self.simulated}
        if self.simulated_reason:
            d["simulated_reason"] = self.simulated_reason
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
        if self.proxy is not None:
            self.proxy.stop()  # first: no client's command queued behind the clean-up
        self.stopping.set()
        self.driver.stop()  # wake a paused loop, and one waiting for the screen, so they see `stopping`

        def job() -> None:  # queued behind an operation in flight, which finishes first
            w = self.driver.detach()
            if w is not None and self.connected:
                w.close()

        try:
            if self.conn.owner is not None:
                self.conn.owner.submit(job).result(timeout)
        except (TpmtopError, TimeoutError):
            # A TPM that is gone or silent: give up on flushing after the time-out rather than
            # hang the exit. Anything else is a bug and must not be swallowed (it once hid a
            # clean-up that never ran: tests/tui/test_tui_quit.py).
            pass
        finally:
            self.conn.close()
