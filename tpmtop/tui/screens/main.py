"""The dashboard: header, observer-effect banner, six panels, footer.

Refresh model: a 5 Hz interval reads the recorder's *current state* (never one message per
TPM command); it does nothing while a modal screen is up or when no command arrived. Polls
are one-shot timers re-armed after each poll. Below 110×32 the panels become tabs (1–6).
"""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Static, Tab, Tabs

from tpmtop.sources.meters import CpuMeter, RateMeter
from tpmtop.sources.protocol import Capabilities
from tpmtop.sources.rows.handles import HandleBook
from tpmtop.sources.rows.modes import comparison, timeline
from tpmtop.sources.rows.resources import ContextGapTracker, SlotPeaks, gauges
from tpmtop.sources.rows.stream import (
    event_matches,
    failed,
    mark_row,
    merge_marks,
    stream_row,
)
from tpmtop.sources.runs import boot_components
from tpmtop.tui import messages as m
from tpmtop.tui.actions import ACTIONS, ENGINES, MODES, OPS, PANELS
from tpmtop.tui.availability import KEY_ACTIONS, PANEL_NEEDS, allowed, refused_why
from tpmtop.tui.pattern_alerts import PatternAlerts
from tpmtop.tui.screens.confirm import ConfirmScreen
from tpmtop.tui.screens.help import HelpScreen
from tpmtop.tui.screens.inspect import InspectScreen
from tpmtop.tui.screens.projection import (
    DEFAULT_N,
    MISSING_LIVE,
    ProjectionScreen,
    projection_summary,
)
from tpmtop.tui.screens.workers import TpmWorkers
from tpmtop.tui.widgets.clients import ClientsPanel
from tpmtop.tui.widgets.footer import TpmtopFooter
from tpmtop.tui.widgets.handles import HandlesPanel
from tpmtop.tui.widgets.header import StatusHeader
from tpmtop.tui.widgets.latency import LatencyPanel
from tpmtop.tui.widgets.modes import ModesPanel
from tpmtop.tui.widgets.resources import ResourcesPanel
from tpmtop.tui.widgets.stream import StreamPanel, StreamView
from tpmtop.tui.widgets.system import SystemPanel
from tpmtop.tui.widgets.table import KeyedTable

REFRESH_S = 0.2  # ≤ 10 refreshes a second, as the issue asks; 5 keeps a paused dashboard idle
RETRY_S = 2.0
COMPACT_W, COMPACT_H = 110, 32
NARROW_W = 120  # below: the footer shows only the essential keys
STREAM_INGEST = 500  # with a filter: newest events searched per refresh
STREAM_ROWS = 120  # newest events turned into rows per refresh; older ones are only counted

OBSERVER = ("[b $warning]Observer effect[/]: on Linux 6.12+ each command tpmtop sends to /dev/tpmrm0 "
            "ends the kernel's kept HMAC session, so the kernel's next PCR extend pays the whole "
            "session setup again. Polling every {interval:g} s; [b]--passive[/] sends nothing.")

def _bindings() -> list[Binding]:
    out = [Binding(a.key, a.action, a.label, show=a.show, tooltip=a.help, id=a.id,
                   key_display={"question_mark,f1": "?", "plus": "+", "minus": "-", "slash": "/",
                                "greater_than_sign": ">"}.get(a.key))
           for a in ACTIONS]
    out += [Binding(k, f"show_panel('{pid}')", t, show=False, id=f"panel-{pid}", tooltip=f"Show the {t} panel")
            for k, pid, t in PANELS]
    return out


class MainScreen(TpmWorkers, Screen):
    BINDINGS = _bindings()

    def __init__(self, source, export_dir: str = ".") -> None:
        super().__init__()
        self.source = source
        self.export_dir = export_dir
        # Only the panels this source can fill: no "live only" or "needs TPM traffic" boxes
        # taking the room of the ones that have something to say.
        self.panels = [pid for _, pid, _ in PANELS if PANEL_NEEDS[pid](source.caps)]
        # At 80×24 one panel shows at a time: start on the timings (an empty Handles table
        # is a poor first screen), then what the source has.
        self.active_panel = "latency" if "latency" in self.panels else self.panels[0]
        self.compact = False
        self.book = HandleBook()
        self.gap = ContextGapTracker()
        self.peaks = SlotPeaks()
        self._warned_full: dict[str, str] = {}  # gauge label -> the level last warned about
        self.ops_rate = RateMeter()
        self.poll = None  # the last PollResult
        self.sysfs = None
        self.ima_rate = RateMeter(window_s=5.0)
        self.cpu = CpuMeter()
        self._seen_seq = 0
        self._seen_total = -1
        self._seen_marks = 0
        self._seen_boundaries = 0
        self._last_slow = 0.0
        self._notified_error: str | None = None
        self._sysfs_reads = 0
        self._stats_dirty = True
        self._ops_per_s = 0.0
        self.alerts = PatternAlerts()  # failure patterns in the stream (issue 14)
        self._boot_n: int | None = None

    # -- layout ---------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        yield Static(id="observer")
        yield Tabs(*[Tab(f"{k} {t}", id=f"tab-{pid}") for k, pid, t in PANELS if pid in self.panels],
                   active=f"tab-{self.active_panel}", id="panel-tabs")
        with Vertical(id="body"):
            with Horizontal(id="top"):
                with Vertical(id="left"):
                    yield HandlesPanel(id="handles")
                    yield ResourcesPanel(id="resources")
                    yield SystemPanel(id="system")
                    yield ClientsPanel(id="clients")
                yield LatencyPanel(id="latency")
            with Horizontal(id="bottom"):
                yield ModesPanel(id="modes")
                yield StreamPanel(id="stream")
        yield TpmtopFooter()

    @property
    def caps(self) -> Capabilities:
        return self.source.caps

    def on_mount(self) -> None:
        src, caps = self.source, self.caps
        banner = self.query_one("#observer", Static)
        if caps.handles and getattr(src, "kernel_device", False):
            banner.update(OBSERVER.format(interval=src.poll_interval))
        else:
            banner.display = False
        self.query_one(StatusHeader).tooltip = src.header().tooltip
        self.set_class(self.panels == ["system"], "-sysfs-only")
        if caps.handles:
            self.poll_tpm()
        if caps.workload:
            self.run_workload()
        if caps.live:
            self.set_interval(REFRESH_S, self.tick)
        if caps.sysfs:
            self.read_sysfs(True)
        first = self.query_one(f"#{self.active_panel}")
        focusable = [w for w in first.query("*") if w.can_focus]
        if focusable:
            focusable[0].focus()
        self._apply_layout()
        self.refresh_all()

    def on_resize(self, event) -> None:
        self._apply_layout()

    def _apply_layout(self) -> None:
        w, h = self.size
        self.compact = bool(w and h) and (w < COMPACT_W or h < COMPACT_H)
        self.set_class(self.compact, "-compact")
        self.set_class(bool(w) and w < NARROW_W, "-narrow")
        self.query_one("#panel-tabs").display = self.compact
        visible = set(self.panels) if not self.compact else {self.active_panel}
        for _, pid, _ in PANELS:
            self.query_one(f"#{pid}").display = pid in visible
        groups = {"left": ("handles", "resources", "system"), "top": ("handles", "resources", "system", "latency"),
                  "bottom": ("modes", "stream")}
        for cid, members in groups.items():
            self.query_one(f"#{cid}").display = any(p in visible for p in members)
        if self.compact:
            tabs = self.query_one("#panel-tabs", Tabs)
            if tabs.active != f"tab-{self.active_panel}":
                tabs.active = f"tab-{self.active_panel}"

    def on_tabs_tab_activated(self, event: Tabs.TabActivated) -> None:
        if event.tab is not None and event.tab.id:
            pid = event.tab.id.removeprefix("tab-")
            if pid != self.active_panel and pid in self.panels:
                self.action_show_panel(pid)

    def action_show_panel(self, pid: str) -> None:
        if pid not in self.panels:
            self.notify(f"no {pid} panel here: {self.caps.why_not or 'nothing to show'}", timeout=3)
            return
        self.active_panel = pid
        self._apply_layout()
        panel = self.query_one(f"#{pid}")
        focusable = [w for w in panel.query("*") if w.can_focus and w.display]
        if focusable:
            focusable[0].focus()
        # Hidden panels are refreshed like visible ones: nothing to recompute here.

    # -- refresh --------------------------------------------------------------------------------
    def tick(self) -> None:
        """Pull the recorder's state (UI thread; cheap reads under the recorder's lock).
        The stream follows at 5 Hz; tables of percentiles refresh once a second, and only
        when a command arrived (hdrh percentiles cost ~1 ms each, and are cached by count)."""
        if self.app.screen is not self:
            return  # a modal is up: nothing is visible to refresh
        src = self.source
        rec = src.recorder
        now = time.monotonic()
        if rec.total != self._seen_total:
            self._seen_total = rec.total
            self._stats_dirty = True
            events = rec.events_since(self._seen_seq)
            if events:
                self._seen_seq = events[-1].seq
                src.errors.feed(events)
                self.peaks.feed(events)
                for ev in events:
                    if ev.cc in (0x161, 0x162, 0x165):
                        self.gap.feed(ev)
                self.alerts.feed(self, events)
            marks = rec.marks[self._seen_marks:]
            self._seen_marks += len(marks)
            if events or marks:
                self._ingest_stream(events, marks)
        self._notify_boundaries()
        self.cpu.sample()
        if now - self._last_slow >= 1.0:
            self._last_slow = now
            self._refresh_stats()
            self._refresh_handles()
            self._refresh_clients()
        self._refresh_header()
        err = getattr(src, "workload_error", None)
        if err and err != self._notified_error:
            self.notify(err, title="workload", severity="error" if not src.running else "warning", timeout=8)
        self._notified_error = err

    def _ingest_stream(self, events, marks=()) -> None:
        stream = self.query_one(StreamPanel)
        if stream.frozen:
            return
        needle = stream.needle.lower()
        if needle == "errors":
            events = [e for e in events[-STREAM_INGEST * 4:] if failed(e)]
        elif needle:
            events = [e for e in events[-STREAM_INGEST * 4:] if event_matches(e, needle)]
        t0 = self.source.recorder.started_ns
        rows = [(ev.t_ns, stream_row(ev, t0)) for ev in events[-STREAM_ROWS:]]
        # Boundaries (a TPM reset, a reconnection) sit in the stream where they happened.
        rows += [(t, mark_row(t, t0, text)) for t, text in marks]
        rows.sort(key=lambda r: r[0])
        stream.add([r for _, r in rows])

    def _notify_boundaries(self) -> None:
        new = self.source.boundaries[self._seen_boundaries:]
        self._seen_boundaries += len(new)
        for _, why in new:
            self.notify(f"{why}. Sessions are set up again; the Latency and Modes panels now show this "
                        "period only, earlier ones are kept apart (and in an export)",
                        title="new TPM period", severity="warning", timeout=10)
            self._stats_dirty = True

    def refresh_all(self) -> None:
        if self.caps.timings:
            self._stats_dirty = True
            self._refresh_stats()
        if self.caps.handles:
            self._refresh_handles()
        self._refresh_header()

    def _total_ops(self, accounts: dict) -> int:
        return sum(getattr(a, "ops", 0) for a in accounts.values())

    def _refresh_stats(self) -> None:
        src = self.source
        if not self._stats_dirty and self._ops_per_s == 0.0:
            return
        self._stats_dirty = False
        runs = src.runs()
        if self.caps.live:
            self._ops_per_s = self.ops_rate.add(sum(r.ops for r in runs) + sum(
                a.ops for p in src.periods for a in p.values()))
        view = src.timings(runs) if self.caps.live else src.timings()
        self.query_one(LatencyPanel).show(view.rows, view.subtitle, view.run_label, src.errors)
        modes = self.query_one(ModesPanel)
        comps = boot_components(runs, src.engine if src.engine != "-" else "native")
        boot = projection_summary(comps, self._projection_n()[0]) if comps else ""
        series = None
        if self.caps.workload:
            width = max(10, modes.content_size.width or 40)
            series = timeline(list(src.timeline), src.op, src.engine, time.monotonic(), width)
        modes.show(comparison(runs, src.op, MODES), src.op, (src.engine, src.mode), boot, series, view.modes_lines)
        modes.border_subtitle = view.modes_note
        if not self.caps.live:
            stream = self.query_one(StreamPanel)
            if not stream.buffer:
                self.alerts.feed(self, src.capture.get("events") or [])  # failure patterns (issue 14)
                stream.add(src.stream, keep=None)  # a capture's events: all of them
                if not src.stream:
                    stream.border_subtitle = "the capture has no events"

    def _refresh_handles(self) -> None:
        src = self.source
        rec = src.recorder
        rows = self.book.rows(rec.handle_uses(), rec.owned_handles(), time.perf_counter_ns())
        self.query_one(HandlesPanel).show(rows)
        if self.poll is not None:
            ident = src.identity
            transient = sum(1 for e in self.poll.entries if e.kind == "transient")
            saved = sum(1 for e in self.poll.entries if e.kind == "saved-session")
            gs = gauges(self.poll.var, ident.fixed if ident else {}, self.gap.gap, transient, saved,
                        self.peaks.peak)
            self.query_one(ResourcesPanel).show(gs)
            self._warn_peaks(gs)

    def _warn_peaks(self, gs) -> None:
        """Warn once when the traffic filled (or nearly filled) a kind of slot between polls:
        the next command to need one fails with 0x902 (objects) or 0x903 (sessions)."""
        for g in gs:
            if g.peak is None or g.peak_level == "ok" or self._warned_full.get(g.label) in (g.peak_level, "full"):
                continue
            self._warned_full[g.label] = g.peak_level  # "warn", then once more at "full"
            rc = "0x902" if g.label.startswith("object") else "0x903"
            self.notify(f"{g.label}: {g.peak} of {g.total} in use at the peak (between polls); at {g.total} the "
                        f"next command that needs one fails with {rc}", title="slots nearly full"
                        if g.peak_level == "warn" else "slots full", severity="warning", timeout=8)

    def _refresh_clients(self) -> None:
        """The Clients panel (proxy): shown with `--listen`, or on a real device someone holds."""
        from tpmtop.proxy.report import client_detail, client_rows

        panel = self.query_one(ClientsPanel)
        proxy = getattr(self.source, "proxy", None)
        if proxy is not None:
            panel.display = not self.compact
            panel.show_clients(client_rows(proxy.accounts, self.source.recorder),
                               lambda key: client_detail(proxy.accounts, key))
            log = getattr(self.source, "proxy_log", [])
            for line in log[getattr(self, "_proxy_seen", 0):]:  # leak reports and dropped clients
                if "LEAK" in line or "connection closed" in line or "failed" in line:  # worth a look
                    self.notify(line, title="proxy", severity="warning", timeout=10)
            self._proxy_seen = len(log)
        elif getattr(self.source, "kernel_device", False):
            from tpmtop.proxy.holders import tpm_holders

            now = time.monotonic()
            if now - getattr(self, "_holders_t", -1e9) >= 10.0:  # a /proc scan: not every second
                self._holders_t = now
                info = tpm_holders()
                panel.display = bool(info["holders"]) and not self.compact
                panel.show_holders(info)
        else:
            panel.display = False

    def _refresh_header(self) -> None:
        h = self.source.header()
        live = self.caps.live
        self.query_one(StatusHeader).show(
            state=h.state, identity=h.identity, tcti=h.tcti, simulated=h.simulated, engine=h.engine, mode=h.mode,
            op=h.op, ops_per_s=self._ops_per_s if live else None, rate=h.rate, extra=h.extra, profile=h.profile,
            marker=h.marker, cpu=self.cpu.text() if live else "")

    # -- worker results ---------------------------------------------------------------------------
    def on_poll_done(self, message: m.PollDone) -> None:
        self.poll = message.result
        entries = message.result.entries
        self.peaks.baseline(sum(1 for e in entries if e.kind == "transient"),
                            sum(1 for e in entries if e.kind == "loaded-session"), message.result.seq)
        self.book.update(message.result.entries)
        self._refresh_handles()
        self._refresh_header()
        self.set_timer(self.source.poll_interval, self.poll_tpm)

    def on_poll_failed(self, message: m.PollFailed) -> None:
        self.notify(message.error, title="poll failed", severity="warning", timeout=5)
        self.set_timer(max(self.source.poll_interval, RETRY_S), self.poll_tpm)

    def on_disconnected(self, message: m.Disconnected) -> None:
        self.source.connected = False
        self.source.last_error = message.error
        self._refresh_header()
        # Both the poller and the workload may report the same loss: re-arm the poller once.
        if not self.workers_in_group("poll") and not getattr(self, "_retry_armed", False):
            self._retry_armed = True
            self.set_timer(RETRY_S, self._retry)

    def _retry(self) -> None:
        self._retry_armed = False
        self.poll_tpm()

    def workers_in_group(self, group: str) -> bool:
        return any(w.group == group and not w.is_finished for w in self.app.workers)

    def on_reconnected(self, message: m.Reconnected) -> None:
        self.notify("the TPM answers again; data captured so far is kept", title="reconnected", timeout=5)
        self.gap.reset()
        self.run_workload()
        self._refresh_header()

    def on_sysfs_read(self, message: m.SysfsRead) -> None:
        if not message.snapshot.pcrs and self.sysfs is not None:
            message.snapshot.pcrs = self.sysfs.pcrs  # PCRs are read every 5th time only
        self.sysfs = message.snapshot
        rate = None
        if message.snapshot.ima_count is not None:
            rate = self.ima_rate.add(message.snapshot.ima_count)
        self.query_one(SystemPanel).show(message.snapshot, rate)
        self._sysfs_reads += 1
        interval = 5.0 if self.caps.handles else 1.0  # beside a live TPM, sysfs is secondary
        # PCR files make the kernel send PCR_Read: every 5th reading only.
        self.set_timer(interval, lambda: self.read_sysfs(self._sysfs_reads % 5 == 0))

    def on_handles_flushed(self, message: m.HandlesFlushed) -> None:
        for h in message.handles:
            self.book.forget(h)
        src = self.source
        if message.handles and not src.running and src.pause_reason and "full" in src.pause_reason:
            src.pause_reason = "paused: a slot was freed, space resumes"
        self._refresh_handles()
        text = ", ".join(f"0x{h:08x}" for h in message.handles) or "nothing left to flush"
        self.notify(f"flushed {text}", title="handles", timeout=4)
        self.poll_tpm()  # confirm from the TPM's own list

    def on_action_failed(self, message: m.ActionFailed) -> None:
        self.notify(message.error, title=f"{message.what} failed", severity="error", timeout=8)

    def on_capture_exported(self, message: m.CaptureExported) -> None:
        self.last_export = message.path
        self.notify(f"{message.path}", title="capture written", timeout=10)

    # -- actions ----------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Textual 8: False hides the binding, None shows it disabled. A key refused here is
        # explained by on_key (a notification), never ignored silently.
        return allowed(action, self.caps, self.source, self)

    def on_key(self, event) -> None:
        """A key whose action makes no sense here says why instead of doing nothing."""
        binding = KEY_ACTIONS.get(event.key)
        if binding is None or self.app.screen is not self:
            return
        name = binding.split("(")[0]
        if allowed(name, self.caps, self.source, self):
            return
        event.stop()
        self.notify(refused_why(name, self.caps, self.source), title="not available", severity="warning",
                    timeout=4)

    def _changed(self) -> None:
        """After a key changed what is shown: the header now, the tables at the next tick
        (recomputing every percentile here would hold the key's screen update back)."""
        self.refresh_bindings()
        if self.caps.live:
            self._stats_dirty = True
            self._last_slow = 0.0
            self._refresh_header()
        else:
            self.refresh_all()

    def action_toggle_workload(self) -> None:
        src = self.source
        src.set_running(not src.running)
        if src.running and not self.workers_in_group("workload"):
            self.run_workload()
        self._refresh_header()

    def action_rate(self, direction: int) -> None:
        rate = self.source.set_rate_step(direction)
        self.notify("as fast as the TPM allows" if rate == 0 else f"{rate:g} operations/s", title="rate", timeout=2)
        self._refresh_header()

    def _cycle(self, what: str, values: tuple[str, ...]) -> None:
        src = self.source
        values = tuple(src.values(what)) or values
        cur = getattr(src, what)
        nxt = values[(values.index(cur) + 1) % len(values)] if cur in values else values[0]
        self._choose(**{what: nxt})

    def _choose(self, **kw) -> None:
        if not self.source.choose(**kw):
            self.notify(f"the capture has no run with {kw}", severity="warning", timeout=3)
        self._changed()

    def action_next_mode(self) -> None:
        self._cycle("mode", MODES)

    def action_next_engine(self) -> None:
        self._cycle("engine", ENGINES)

    def action_next_op(self) -> None:
        self._cycle("op", OPS)

    def action_set_mode(self, mode: str) -> None:
        self._choose(mode=mode)

    def action_set_engine(self, engine: str) -> None:
        self._choose(engine=engine)

    def action_set_op(self, op: str) -> None:
        self._choose(op=op)

    def action_flush_selected(self) -> None:
        panel = self.query_one(HandlesPanel)
        row = panel.selected_row()
        if row is None or row.state == "gone":
            self.notify("select a handle the TPM still lists", severity="warning", timeout=3)
            return
        if row.handle >> 24 not in (0x80, 0x02, 0x03):
            self.notify(f"{row.key} is a {row.kind}: tpmtop flushes only transient objects and sessions",
                        severity="warning", timeout=5)
            return
        if row.ours:
            self.flush_handles([row.handle])
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.flush_handles([row.handle])

        self.app.push_screen(ConfirmScreen(
            f"Flush {row.key}? tpmtop did not create it.",
            f"It is a {row.kind} held by another program (or the kernel); flushing it breaks that "
            "program's next command."), answered)

    def action_show_tcti(self) -> None:
        src = self.source
        proxy = getattr(src, "proxy", None)
        if proxy is not None and getattr(proxy, "port", None):
            # `--listen P`: the proxy serves this TPM to other programs, recorded as clients.
            tcti = f"{proxy.protocol}:host={proxy.host},port={proxy.port}"
            self.app.copy_to_clipboard(tcti)
            self.notify(f"connect your own tools here: tpm2-tools -T {tcti}  (copied); their commands "
                        "show in Clients and in the stream", title="TCTI", timeout=12)
            return
        if getattr(src, "simulated", False) and getattr(getattr(src, "conn", None), "sim", None) is not None:
            self.notify("tpmtop's private swtpm sits on a socket pair only tpmtop holds. To hand it to "
                        "tpm2-tools, start the dashboard with --listen 2321 (tpm2-tools then take "
                        "-T swtpm:host=127.0.0.1,port=2321, recorded as clients); or start a standalone one (swtpm socket --tpm2 --server port=2321 "
                        "--ctrl type=tcp,port=2322 --flags not-need-init,startup-clear --tpmstate dir=DIR) and "
                        "run tpmtop -T swtpm:host=127.0.0.1,port=2321; tpm2-tools take the same -T string.",
                        title="TCTI", timeout=15)
            return
        self.app.copy_to_clipboard(src.tcti)
        self.notify(f"tpm2-tools: -T {src.tcti}  (copied)", title="TCTI", timeout=10)

    def selected_handle(self) -> int | None:
        return self.query_one(HandlesPanel).selected

    def action_sort_table(self) -> None:
        table = self.focused if isinstance(self.focused, KeyedTable) else None
        if table is None:
            self.notify("focus a table first (1 Handles, 3 Latency)", severity="warning", timeout=3)
            return
        by = table.cycle_sort()
        self.notify(f"sorted by {by}", title="sort", timeout=2)

    def action_inspect_selected(self) -> None:
        row = self.query_one(HandlesPanel).selected_row()
        if row is None or row.state == "gone":
            self.notify("select a handle the TPM still lists (keys 1, then the arrows)", severity="warning", timeout=3)
            return
        self.inspect_handle(row.handle, row.kind, row.ours)

    def on_handle_inspected(self, message: m.HandleInspected) -> None:
        self.app.push_screen(InspectScreen(message.title, message.rows))

    def action_flush_ours(self) -> None:
        self.flush_handles(None)

    def action_reset_stats(self) -> None:
        self.source.reset_stats()
        self.source.errors.clear()
        self.alerts = PatternAlerts()  # the patterns' counts start again with the statistics
        self.peaks.reset()
        self._warned_full.clear()
        self.ops_rate.reset()
        stream = self.query_one(StreamPanel)
        stream.clear()
        self._seen_total = -1
        self._seen_marks = len(self.source.recorder.marks)
        self.refresh_all()
        self.notify("statistics reset", timeout=2)

    def action_export(self) -> None:
        self.notify("writing a capture…", title="export", timeout=3)  # takes seconds with many events
        self.export_capture()

    def on_stream_view_decode_requested(self, event: StreamView.DecodeRequested) -> None:
        from tpmtop.tui.screens.decode import DecodeScreen

        self.app.push_screen(DecodeScreen(self.source, event.row))

    def action_toggle_stream(self) -> None:
        panel = self.query_one(StreamPanel)
        snapshot = None
        if self.caps.live and not panel.frozen:
            rec = self.source.recorder
            snapshot = (merge_marks(rec.events(), rec.marks), rec.started_ns)
        frozen = panel.toggle(snapshot)
        self.notify("stream frozen (recording goes on)" if frozen else "stream follows", timeout=2)

    def action_filter_stream(self) -> None:
        table = self.focused if isinstance(self.focused, KeyedTable) else None
        if table is not None:  # "/" on Handles or Latency filters that table
            from tpmtop.tui.screens.filter import FilterScreen

            def done(needle: str | None) -> None:
                if needle is not None:
                    table.set_filter(needle)  # the panel's subtitle names it at its next refresh
                    self._stats_dirty = True
                    self.refresh_all()

            self.app.push_screen(FilterScreen(table.needle), done)
            return
        if self.compact and self.active_panel != "stream":
            self.action_show_panel("stream")
        self.query_one(StreamPanel).open_filter()

    def action_next_theme(self) -> None:
        self.app.cycle_theme()

    def action_show_boot(self) -> None:
        # Installed once: the report is built the first time only ('r' on that screen rebuilds).
        if not self.app.is_screen_installed("boot"):
            from tpmtop.tui.screens.boot import BootScreen

            self.app.install_screen(BootScreen(getattr(self.app, "boot_root", "/")), "boot")
        self.app.push_screen("boot")

    def _projection_n(self) -> tuple[int, str]:
        if self._boot_n is not None:
            return self._boot_n, "set with p"
        if self.sysfs is not None and self.sysfs.ima_count:
            return self.sysfs.ima_count, "this machine's IMA measurements"
        return DEFAULT_N, "a round number: no IMA count readable here"

    def action_show_projection(self) -> None:
        comps = boot_components(self.source.runs(), self.source.engine if self.source.engine != "-" else "native")
        n, why = self._projection_n()
        kernel = self.caps.state_word == "kernel"
        if kernel:
            where = "the kernel's own per-command p50s"
        else:
            where = "this sitting's per-command p50s" if self.caps.live else "the capture's per-command p50s"
        if self.caps.workload:
            missing = MISSING_LIVE
        else:  # nothing here can run the mode that would measure it
            missing = "not seen: the kernel sent none" if kernel else "not in this capture"

        def done(new_n: int | None) -> None:
            if new_n is not None:
                self._boot_n = new_n
                self._stats_dirty = True

        self.app.push_screen(ProjectionScreen(comps, n, why, where, missing), done)

    def action_help(self) -> None:
        # Keys this source can never act on (False, not "not now") are named, not listed as keys.
        never = frozenset(a.action for a in ACTIONS
                          if allowed(a.action.split("(")[0], self.caps, self.source, self) is False)
        self.app.push_screen(HelpScreen(never, self.caps.why_not if never else "", tuple(self.panels)))

    def action_quit(self) -> None:
        self.app.exit()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "handles-table":  # Enter on a handle: inspect it
            self.action_inspect_selected()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "handles-table":
            self.refresh_bindings()
