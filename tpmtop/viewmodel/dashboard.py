"""The dashboard's view-model: everything the screen shows that outlives one frame — the
handle book, slot peaks, the context-gap tracker, rate and CPU meters, the response codes
seen, the failure-pattern alerts — owned here, below the UI, and turned into one immutable
:class:`~tpmtop.viewmodel.frame.Frame` per tick.

The screen (:mod:`tpmtop.tui.screens.main`) places each part of a frame in its widget and
shows its notices; it never writes to a source nor reads the recorder. Worker results
(a poll, a flush, a lost TPM) come in through the ``on_*`` methods here. No Textual here, so
all of it is testable without a terminal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tpmtop.sessions.modes import MODES, Engine
from tpmtop.sources.meters import CpuMeter, RateMeter
from tpmtop.sources.protocol import UNSET, Source, SourceKind
from tpmtop.sources.runs import boot_components, boot_per_mode
from tpmtop.textsafe import counted
from tpmtop.tpm.exchange import Origin
from tpmtop.tpm.handles import HandleKind
from tpmtop.viewmodel.alerts import PatternAlerts
from tpmtop.viewmodel.commands import Commands
from tpmtop.viewmodel.frame import (
    ClientsView,
    Frame,
    HandlesView,
    HeaderView,
    Notice,
    Severity,
    StatsView,
    StreamPart,
    TimingsPart,
)
from tpmtop.viewmodel.labels import cpu_text, header_text, timing_notes
from tpmtop.viewmodel.rows.handles import HandleBook, HandleState
from tpmtop.viewmodel.rows.latency import ErrorBook, timing_rows
from tpmtop.viewmodel.rows.modes import PER_MODE_WHAT, comparison, headline, projection_summary, vs_none
from tpmtop.viewmodel.rows.resources import ContextGapTracker, Gauge, GaugeLevel, SlotPeaks, gauges
from tpmtop.viewmodel.rows.stream import captured_rows, event_matches, failed, mark_row, merge_marks, stream_row

STREAM_INGEST = 500  # with a filter: newest events searched per refresh
STREAM_ROWS = 120  # newest events turned into rows per refresh; older ones are only counted
STREAM_BACKFILL = 2000  # a new stream filter searches the recorder's whole ring: its newest matches
SLOW_S = 1.0  # tables of percentiles: once a second, and only when a command arrived
HOLDERS_S = 10.0  # a /proc scan for a device's holders: not every second
DEFAULT_N = 1000  # the projection's extends when no IMA count is readable
CONTEXT_CCS = (0x161, 0x162, 0x165)  # ContextLoad, ContextSave, FlushContext: the gap tracker's
NO_EVENTS = ("this capture holds no per-command events, only each run's summary: "
             "record them with tpmtop bench --events --json FILE")  # a capture of summaries only


class Dashboard:
    """One per dashboard screen. ``part_builders``: panel id -> a function of the source that
    returns that panel's part (:attr:`Frame.parts`, once a second): the panels declared with a
    build (tpmtop.tui.panels.PanelSpec.build)."""

    def __init__(self, source: Source, part_builders: dict[str, Callable[[Source], object]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.caps = source.caps
        self.commands = Commands(source)  # what the screen asks of the source (it calls no source itself)
        self.clock = clock
        self.part_builders = dict(part_builders or {})
        # A capture's response codes come with it; live ones are counted here as they arrive.
        self.errors = ErrorBook.of(source.failures) if not self.caps.live else ErrorBook()
        # Live: the workload's failed commands per (engine, mode, op) run, so a run's Latency rows
        # count its own errors, not those another mode met (once, the start-up's lost connection).
        self.run_errors: dict[tuple[Any, Any, Any], ErrorBook] = {}
        self.book = HandleBook()
        self.gap = ContextGapTracker()
        self.peaks = SlotPeaks()
        self.alerts = PatternAlerts()  # failure patterns in the stream (issue 14)
        self.ops_rate = RateMeter()
        self.ima_rate = RateMeter(window_s=5.0)
        self.cpu = CpuMeter()
        self.poll: Any = None  # the last PollResult
        self.sysfs: Any = None  # the last SysfsSnapshot
        self.boot_n: int | None = None  # the projection's N, once the operator typed one
        self._warned_full: dict[str, GaugeLevel] = {}  # gauge label -> the level last warned about
        self._seen_seq = 0
        self._seen_total = -1
        self._seen_marks = 0
        self._seen_boundaries = 0
        self._proxy_seen = 0
        self._holders_t = -1e9
        self._last_slow = 0.0
        self._notified_error: str | None = None
        self._stats_dirty = True
        self._vs_none = ""  # the running mode's ratio to `none`, from the last statistics (the header says it)
        self.stats_due = False  # tick(stats_elsewhere=True): the tables' percentiles are to be computed
        self.generation = 0  # +1 when a key changes what the tables show: older stats are dropped
        self._last_runs: list[Any] | None = None  # as the tables last showed them (the projection's too)
        self._ops_per_s = 0.0
        self._rate_key: tuple[str, str, str] | None = None  # the run the rate meter counts
        self._rate_ops = 0
        self._replayed = False
        self._stream_note = ""  # what the stream says while it is empty, as last sent
        self._stream_needle = ""  # the stream filter the panel's rows were last searched with

    # -- one tick ------------------------------------------------------------------------------
    def tick(self, *, stream_filter: str | None, modes_width: int, compact: bool,
             stats_elsewhere: bool = False) -> Frame:
        """Pull the recorder's state (cheap reads under its lock). ``stream_filter``: the
        Stream panel's filter text, None while it is frozen (no rows then). ``stats_elsewhere``:
        the once-a-second percentiles are left out and :attr:`stats_due` set instead — the
        screen computes them on a worker thread (:meth:`stats`), so no key waits behind them."""
        src, rec = self.source, self.source.recorder
        notices: list[Notice] = []
        stream = None
        if rec is not None and rec.total != self._seen_total:
            self._seen_total = rec.total
            self._stats_dirty = True
            events = rec.events_since(self._seen_seq)
            if events:
                self._seen_seq = events[-1].seq
                self.errors.feed(events)
                self._feed_run_errors(events)
                self.peaks.feed(events)
                for ev in events:
                    if ev.cc in CONTEXT_CCS:
                        self.gap.feed(ev)
                notices += self.alerts.feed(events)
            marks = rec.marks[self._seen_marks:]
            self._seen_marks += len(marks)
            if (events or marks) and stream_filter is not None:
                stream = StreamPart(self._stream_rows(events, marks, stream_filter))
        if stream_filter is not None and rec is not None and stream_filter.strip().lower() != self._stream_needle:
            # A new filter searches everything kept, not only the rows the panel holds (a few
            # seconds of a fast workload): `errors` must find every failure the counters count.
            self._stream_needle = stream_filter.strip().lower()
            stream = StreamPart(self._backfill(self._stream_needle), replace=True)
        notices += self._boundaries()
        self.cpu.sample()
        stats = handles = clients = None
        parts: dict[str, object] = {}
        now = self.clock()
        if now - self._last_slow >= SLOW_S:
            self._last_slow = now
            note = src.stream_note()
            if note != self._stream_note:  # said in the stream, and by a kernel source under Modes
                self._stream_note = note
                self._stats_dirty = True
                if stream is None:
                    stream = StreamPart([], empty_note=note)
            stats = None if stats_elsewhere else self.stats(modes_width)
            self.stats_due = stats_elsewhere
            handles = self.handles(notices)
            clients = self.clients(notices, compact)
            parts = {pid: build(self.source) for pid, build in self.part_builders.items()}
        err = src.workload_error
        if err and err != self._notified_error:
            notices.append(Notice(err, "workload", Severity.ERROR if not src.running else Severity.WARNING, 8))
        self._notified_error = err
        return Frame(self.header(), stream, stats, handles, clients, parts, tuple(notices))

    def _feed_run_errors(self, events: list[Any]) -> None:
        for ev in events:
            if ev.origin == Origin.WORKLOAD and failed(ev):
                book = self.run_errors.get((ev.engine, ev.mode, ev.op))
                if book is None:
                    book = self.run_errors[(ev.engine, ev.mode, ev.op)] = ErrorBook()
                book.feed((ev,))

    def _backfill(self, needle: str) -> list[Any]:
        rec = self.source.recorder
        assert rec is not None
        if needle == "errors":
            events = rec.failed_events()
        elif needle:
            events = [e for e in rec.events() if event_matches(e, needle)]
        else:
            events = rec.events(STREAM_BACKFILL)
        t0 = rec.started_ns
        rows = [(ev.t_ns, stream_row(ev, t0)) for ev in events[-STREAM_BACKFILL:]]
        rows += [(t, mark_row(t, t0, text)) for t, text in rec.marks if t >= t0]
        rows.sort(key=lambda r: r[0])
        return [r for _, r in rows]

    def _stream_rows(self, events: list[Any], marks: list[tuple[int, str]], needle: str) -> list[Any]:
        needle = needle.lower()
        if needle == "errors":
            events = [e for e in events[-STREAM_INGEST * 4:] if failed(e)]
        elif needle:
            events = [e for e in events[-STREAM_INGEST * 4:] if event_matches(e, needle)]
        t0 = self.source.recorder.started_ns if self.source.recorder is not None else 0
        rows = [(ev.t_ns, stream_row(ev, t0)) for ev in events[-STREAM_ROWS:]]
        # Boundaries (a TPM reset, a reconnection) sit in the stream where they happened.
        rows += [(t, mark_row(t, t0, text)) for t, text in marks]
        rows.sort(key=lambda r: r[0])
        return [r for _, r in rows]

    def _boundaries(self) -> list[Notice]:
        new = self.source.boundaries[self._seen_boundaries:]
        self._seen_boundaries += len(new)
        if new:
            self._stats_dirty = True
            self.run_errors.clear()  # the Latency panel shows the new period: its errors start at 0
        return [Notice(f"{why}. Sessions are set up again; the Latency and Modes panels now show this period "
                       "only, earlier ones are kept apart (and in an export)", "new TPM period", Severity.WARNING, 10)
                for _, why in new]

    _said_simulated = False  # the fallback's reason: once, on the first screen

    def first(self, modes_width: int) -> Frame:
        """The frame a screen opens on (and redraws after a key changed what is shown)."""
        self._stats_dirty = True
        notices: list[Notice] = []
        why = self.source.simulated_reason
        if why and self.source.simulated and why != "--sim was given" and not self._said_simulated:
            self._said_simulated = True
            # the dashboard fell back to a simulator: said on the first screen, not at exit
            notices.append(Notice(f"simulated TPM: {why}", "no TPM", Severity.WARNING, 30))
        parts = {pid: build(self.source) for pid, build in self.part_builders.items()}
        return Frame(self.header(), self.replayed_stream(notices), self.stats(modes_width) if self.caps.timings
                     else None, self.handles(notices) if self.caps.handles else None, None, parts, tuple(notices))

    def replayed_stream(self, notices: list[Notice]) -> StreamPart | None:
        """A capture's whole stream, once (its failure patterns with it)."""
        if self.caps.live or not self.caps.timings or self._replayed:
            return None
        self._replayed = True
        notices += self.alerts.feed(self.source.events())
        captured = self.source.captured_stream()
        rows = captured_rows(captured)
        empty = NO_EVENTS if not captured.events else "the capture has no events"
        return StreamPart(rows, keep_all=True, empty_note="" if rows else (self.source.stream_note() or empty))

    # -- the parts -----------------------------------------------------------------------------
    def header(self) -> HeaderView:
        live = self.caps.live
        return HeaderView(header_text(self.source.header()), self._ops_per_s if live else None,
                          cpu_text(self.cpu) if live else "", self._vs_none)

    def stats(self, modes_width: int) -> StatsView | None:
        src = self.source
        if not self.caps.timings or (not self._stats_dirty and self._ops_per_s == 0.0):
            return None
        self._stats_dirty = False
        runs = src.runs()
        self._last_runs = runs
        if self.caps.live:
            self._ops_per_s = self._run_rate(runs)
        t = src.timings(runs)
        view = TimingsPart(timing_rows(t), *timing_notes(t))
        engine = self.engine_for_projection()
        comps = boot_components(runs, engine)
        per_mode = boot_per_mode(runs, engine)
        boot = projection_summary(comps, self.projection_n()[0], per_mode) if comps or per_mode else ""
        series = None
        if self.caps.workload:
            series = src.timeline.series(src.op, src.engine, self.clock(), max(10, modes_width or 40))
        errors = self.errors
        if self.caps.live and any(r.key == (src.engine, src.mode, src.op) for r in runs):
            errors = self.run_errors.get((src.engine, src.mode, src.op)) or ErrorBook()
        rows = comparison(runs, src.op, MODES, src.baseline_ops)
        current = (src.engine, src.mode)
        self._vs_none = vs_none(rows, current)  # the header says it too: on the first screen at 80×24
        return StatsView(view, errors, rows, src.op, current, boot, series,
                         headline(rows, current, self.caps.workload and not src.read_only))

    def _run_rate(self, runs: list[Any]) -> float:
        """Operations a second of the run the rate applies to (the header's engine, mode and
        op; the Latency panel's run and its count): not every run's sum, which added the
        interleaved `none` baseline and read 130 ops/s beside "rate 100/s"."""
        src = self.source
        key = (src.engine, src.mode, src.op)
        ops = next((r.ops for r in runs if r.key == key), 0)
        if key != self._rate_key or ops < self._rate_ops:  # another run, or a new TPM period's
            self.ops_rate.reset()
        self._rate_key, self._rate_ops = key, ops
        return self.ops_rate.add(ops)

    def handles(self, notices: list[Notice]) -> HandlesView | None:
        rec = self.source.recorder
        if not self.caps.handles or rec is None:
            return None
        rows = self.book.rows(rec.handle_uses(), rec.owned_handles(), time.perf_counter_ns(), self._client_handles())
        gs = None
        if self.poll is not None:
            ident = self.source.identity
            entries = self.poll.entries
            transient = sum(1 for e in entries if e.kind is HandleKind.TRANSIENT)
            saved = sum(1 for e in entries if e.kind is HandleKind.SAVED_SESSION)
            gs = gauges(self.poll.var, ident.fixed if ident else {}, self.gap.gap, transient, saved, self.peaks.peak)
            notices += self._warn_peaks(gs)
        return HandlesView(rows, gs)

    def _client_handles(self) -> dict[int, tuple[str, int | None]]:
        """handle -> (program, pid) for what the proxy's clients created and still hold."""
        proxy = self.source.proxy
        if proxy is None:
            return {}
        out = {}
        for c, held in proxy.accounts.held_all():
            out[held.handle] = (c.name, c.peer.pid)
        return out

    def _warn_peaks(self, gs: list[Gauge]) -> list[Notice]:
        """Warn once when the traffic filled (or nearly filled) a kind of slot between polls:
        the next command to need one fails with 0x902 (objects) or 0x903 (sessions)."""
        out = []
        for g in gs:
            level = g.peak_level
            if g.peak is None or level is GaugeLevel.OK or self._warned_full.get(g.label) in (level, GaugeLevel.FULL):
                continue
            self._warned_full[g.label] = level  # warn, then once more at full
            rc = "0x902" if g.label.startswith("object") else "0x903"
            out.append(Notice(f"{g.label}: {g.peak} of {g.total} in use at the peak (between polls); at {g.total} "
                              f"the next command that needs one fails with {rc}",
                              "slots nearly full" if level is GaugeLevel.WARN else "slots full", Severity.WARNING, 8))
        return out

    def clients(self, notices: list[Notice], compact: bool) -> ClientsView | None:
        """The Clients panel: a proxy's clients with `--listen`, or who holds a real device."""
        src = self.source
        if src.proxy is not None:
            from tpmtop.proxy.lines import WORTH_A_LOOK, kind_of
            from tpmtop.proxy.report import client_detail, client_rows

            accounts = src.proxy.accounts
            log = src.proxy_log
            for line in log[self._proxy_seen:]:  # leaks, dropped clients, TPM faults
                if kind_of(line) in WORTH_A_LOOK:
                    notices.append(Notice(line, "proxy", Severity.WARNING, 10))
            self._proxy_seen = len(log)
            return ClientsView(client_rows(accounts, src.recorder), lambda key: client_detail(accounts, key))
        if src.kernel_device:
            now = self.clock()
            if now - self._holders_t < HOLDERS_S:
                return None
            self._holders_t = now
            from tpmtop.proxy.holders import tpm_holders

            info = tpm_holders()
            return ClientsView(holders=info, shown=bool(info["holders"]))
        return None

    # -- worker results ------------------------------------------------------------------------
    def on_poll(self, result: Any) -> Frame:
        self.poll = result
        entries = result.entries
        self.peaks.baseline(sum(1 for e in entries if e.kind is HandleKind.TRANSIENT),
                            sum(1 for e in entries if e.kind is HandleKind.LOADED_SESSION), result.seq)
        self.book.update(entries, result.seq if self.source.recorder is not None else None)
        notices: list[Notice] = []
        return Frame(self.header(), handles=self.handles(notices), notices=tuple(notices))

    def on_lost(self, error: str) -> Frame:
        self.source.lost(error)
        return Frame(self.header())

    def on_reconnected(self) -> Frame:
        self.gap.reset()
        return Frame(self.header(), notices=(Notice("the TPM answers again; data captured so far is kept",
                                                    "reconnected", timeout=5),))

    def on_sysfs(self, snapshot: Any) -> float | None:
        """Keep the newest reading (PCRs are read every 5th time only); the IMA rate."""
        if not snapshot.pcrs and self.sysfs is not None:
            snapshot.pcrs = self.sysfs.pcrs
        self.sysfs = snapshot
        return self.ima_rate.add(snapshot.ima_count) if snapshot.ima_count is not None else None

    def on_flushed(self, handles: list[int], only_ours: bool = False) -> Frame:
        """``only_ours``: F flushed tpmtop's own handles; the notice counts the others it left."""
        rec = self.source.recorder
        seq = rec.total if rec is not None else None  # at least the flush's own command
        for h in handles:
            self.book.forget(h, seq)
        if handles:
            self.source.slot_freed()
        notices: list[Notice] = []
        view = self.handles(notices)
        text = "flushed " + ", ".join(f"0x{h:08x}" for h in handles) if handles else "nothing of tpmtop's to flush"
        if only_ours and view is not None:
            left = [r for r in view.rows if r.state is not HandleState.GONE and not r.ours
                    and r.kind != HandleKind.PERSISTENT]
            if left:
                text += f"; left {counted(len(left), 'handle')} tpmtop did not create (f flushes one, after asking)"
        return Frame(self.header(), handles=view, notices=(*notices, Notice(text, "handles", timeout=6)))

    def tick_header(self) -> Frame:
        """Only the header: what a key changed shows at once, the tables follow at the next tick."""
        return Frame(self.header())

    # -- what keys do --------------------------------------------------------------------------
    def tcti_hint(self) -> tuple[str, str, float, str | None]:
        """T: (text, title, seconds shown, what to copy): how to point tpm2-tools at this TPM."""
        src = self.source
        proxy = src.proxy
        if proxy is not None and getattr(proxy, "port", None):
            # `--listen P`: the proxy serves this TPM to other programs, recorded as clients.
            tcti = f"{proxy.protocol}:host={proxy.host},port={proxy.port}"
            return (f"connect your own tools here: tpm2-tools -T {tcti}  (copied); their commands show in Clients "
                    "and in the stream", "TCTI", 12, tcti)
        if src.simulated:
            return ("tpmtop's private swtpm sits on a socket pair only tpmtop holds. To hand it to tpm2-tools, start "
                    "the dashboard with --listen 2321 (tpm2-tools then take -T swtpm:host=127.0.0.1,port=2321, "
                    "recorded as clients); or start a standalone one (swtpm socket --tpm2 --server port=2321 "
                    "--ctrl type=tcp,port=2322 --flags not-need-init,startup-clear --tpmstate dir=DIR) and run "
                    "tpmtop -T swtpm:host=127.0.0.1,port=2321; tpm2-tools take the same -T string.", "TCTI", 15, None)
        return f"tpm2-tools: -T {src.tcti}  (copied)", "TCTI", 10, src.tcti

    def changed(self) -> None:
        """A key changed what is shown: the tables at the next tick (recomputing every
        percentile now would hold the key's screen update back)."""
        self._stats_dirty = True
        self._last_slow = 0.0
        self._vs_none = ""  # of the run shown before: said again once this one's is computed
        self.generation += 1

    def toggle_workload(self) -> bool:
        """Pause or resume; True when the workload runs now."""
        self.source.set_running(not self.source.running)
        return self.source.running

    def rate(self, direction: int) -> float:
        return self.source.set_rate_step(direction)

    def choose(self, **what: str) -> bool:
        return self.source.choose(**what)

    def next_value(self, what: str, values: tuple[str, ...]) -> str:
        """The engine, mode or op after the current one (a capture's own, in replay)."""
        values = tuple(self.source.values(what)) or values
        src = self.source
        cur = {"engine": src.engine, "mode": src.mode, "op": src.op}[what]
        return values[(values.index(cur) + 1) % len(values)] if cur in values else values[0]

    def reset(self) -> None:
        """r: the statistics and the stream start again (the TPM is not touched)."""
        self.source.reset_stats()
        self.errors.clear()
        self.run_errors.clear()
        self.alerts = PatternAlerts()  # the patterns' counts start again with the statistics
        self.peaks.reset()
        self._warned_full.clear()
        self.ops_rate.reset()
        self._seen_total = -1
        rec = self.source.recorder
        self._seen_marks = len(rec.marks) if rec is not None else 0
        self._stats_dirty = True
        self._last_runs = None
        self.generation += 1

    def stream_snapshot(self) -> tuple[list[Any], int] | None:
        """s: every command the recorder keeps, and its clock's start (None: not live)."""
        rec = self.source.recorder
        if not self.caps.live or rec is None:
            return None
        events = rec.events()
        # Failures the ring no longer holds are still counted: keep them findable frozen too.
        oldest = events[0].seq if events else rec.total + 1
        older_failures = [e for e in rec.failed_events() if e.seq < oldest]
        return merge_marks(older_failures + events, [m for m in rec.marks if m[0] >= rec.started_ns]), rec.started_ns

    # -- the boot projection (p) ---------------------------------------------------------------
    def engine_for_projection(self) -> str:
        return self.source.engine if self.source.engine != UNSET else Engine.NATIVE

    def projection_n(self) -> tuple[int, str]:
        if self.boot_n is not None:
            return self.boot_n, "set with p"
        if self.sysfs is not None and self.sysfs.ima_count:
            return self.sysfs.ima_count, "this machine's IMA measurements"
        return DEFAULT_N, "a round number: no IMA count readable here"

    def projection(self, missing_live: str) -> tuple[dict[str, float], int, str, str, str, dict[str, float], str]:
        """(per-command p50s, N, why that N, whose p50s, what an unmeasured one says, each
        mode's own op p50 where it ran, what those are called): the Modes line's numbers."""
        # Live, the p50s the tables show (at most a second old): the projection agrees with the
        # Modes panel, and p does not recompute every histogram's percentiles on the UI thread.
        runs = self._last_runs if self.caps.live and self._last_runs is not None else self.source.runs()
        comps = boot_components(runs, self.engine_for_projection())
        per_mode = boot_per_mode(runs, self.engine_for_projection())
        n, why = self.projection_n()
        kernel = self.caps.kind is SourceKind.KERNEL
        if kernel:
            where = "the kernel's own per-command p50s"
        else:
            where = "this sitting's per-command p50s" if self.caps.live else "the capture's per-command p50s"
        if self.caps.workload:
            missing = missing_live
        else:  # nothing here can run the mode that would measure it
            missing = "not seen: the kernel sent none" if kernel else "not in this capture"
        what = PER_MODE_WHAT if self.caps.live else "capture p50"
        return comps, n, why, where, missing, per_mode, what

    def set_boot_n(self, n: int) -> None:
        self.boot_n = n
        self._stats_dirty = True
