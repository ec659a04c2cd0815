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

from tpmtop.tui import messages as m
from tpmtop.tui.actions import ACTIONS, ENGINES, MODES, OPS, PANELS
from tpmtop.sources.model import (ContextGapTracker, HandleBook, RateMeter, command_rows_live,
                              command_rows_run, comparison, gauges, mark_row, op_rows, runs_from_accounts,
                              stream_row)
from tpmtop.tui.screens.confirm import ConfirmScreen
from tpmtop.tui.screens.help import HelpScreen
from tpmtop.tui.screens.workers import TpmWorkers
from tpmtop.tui.widgets.clients import ClientsPanel
from tpmtop.tui.widgets.footer import TpmtopFooter
from tpmtop.tui.widgets.handles import HandlesPanel
from tpmtop.tui.widgets.header import StatusHeader
from tpmtop.tui.widgets.latency import LatencyPanel
from tpmtop.tui.widgets.modes import ModesPanel
from tpmtop.tui.widgets.resources import ResourcesPanel
from tpmtop.tui.widgets.stream import StreamPanel
from tpmtop.tui.widgets.system import SystemPanel

REFRESH_S = 0.2  # ≤ 10 refreshes a second, as the issue asks; 5 keeps a paused dashboard idle
RETRY_S = 2.0
COMPACT_W, COMPACT_H = 110, 32
STREAM_INGEST = 500  # with a filter: newest events searched per refresh
STREAM_ROWS = 120  # newest events turned into rows per refresh; older ones are only counted

OBSERVER = ("[b $warning]Observer effect[/]: on Linux 6.12+ each command tpmtop sends to /dev/tpmrm0 "
            "ends the kernel's kept HMAC session, so the kernel's next PCR extend pays the whole "
            "session setup again. Polling every {interval:g} s; [b]--passive[/] sends nothing.")

LIVE_ONLY = {"toggle_workload", "rate", "flush_selected", "flush_ours", "reset_stats", "export"}
CHANGES_TPM = {a.action.split("(")[0] for a in ACTIONS if a.changes_tpm}
SELECTS_RUN = {"next_mode", "next_engine", "next_op", "set_mode", "set_engine", "set_op"}


def _bindings() -> list[Binding]:
    out = [Binding(a.key, a.action, a.label, show=a.show, tooltip=a.help, id=a.id,
                   key_display={"question_mark": "?", "plus": "+", "minus": "-", "slash": "/"}.get(a.key))
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
        self.active_panel = "handles"
        self.compact = False
        self.book = HandleBook()
        self.gap = ContextGapTracker()
        self.ops_rate = RateMeter()
        self.poll = None  # the last PollResult
        self.sysfs = None
        self.ima_rate = RateMeter(window_s=5.0)
        self._seen_seq = 0
        self._seen_total = -1
        self._seen_marks = 0
        self._seen_boundaries = 0
        self._last_slow = 0.0
        self._notified_error: str | None = None
        self._sysfs_reads = 0
        self._stats_dirty = True
        self._ops_per_s = 0.0

    # -- layout ---------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        yield Static(id="observer")
        yield Tabs(*[Tab(f"{k} {t}", id=f"tab-{pid}") for k, pid, t in PANELS], id="panel-tabs")
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
    def kind(self) -> str:
        return self.source.kind

    def on_mount(self) -> None:
        src = self.source
        banner = self.query_one("#observer", Static)
        if self.kind == "live" and src.kernel_device:
            banner.update(OBSERVER.format(interval=src.poll_interval))
        else:
            banner.display = False
        if self.kind == "live" and src.profile_note:
            self.query_one(StatusHeader).tooltip = src.profile_note
        elif self.kind == "replay" and src.tpm.get("profile"):
            self.query_one(StatusHeader).tooltip = (f"profile {src.tpm['profile']}: the capture's latencies "
                                                    "were reproduced on a simulator")
        # The System panel only earns its place where there is a kernel to read.
        self.show_system = self.kind == "passive" or getattr(src, "kernel_device", False)
        if self.kind == "passive":
            for pid in ("handles", "resources", "latency", "modes", "stream"):
                self.query_one(f"#{pid}").mark_passive()
            self.read_sysfs(True)
        elif self.kind == "live":
            self.poll_tpm()
            self.run_workload()
            self.set_interval(REFRESH_S, self.tick)
            if self.show_system:
                self.read_sysfs(True)
        else:
            self.query_one("#handles").mark_replay()
            self.query_one("#resources").mark_replay()
        self.query_one("#handles-table").focus()
        self._apply_layout()
        self.refresh_all()

    def on_resize(self, event) -> None:
        self._apply_layout()

    def _apply_layout(self) -> None:
        w, h = self.size
        self.compact = bool(w and h) and (w < COMPACT_W or h < COMPACT_H)
        self.set_class(self.compact, "-compact")
        self.query_one("#panel-tabs").display = self.compact
        visible = {pid for _, pid, _ in PANELS} if not self.compact else {self.active_panel}
        if not self.compact and not self.show_system:
            visible.discard("system")
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
            if pid != self.active_panel:
                self.action_show_panel(pid)

    def action_show_panel(self, pid: str) -> None:
        self.active_panel = pid
        self._apply_layout()
        panel = self.query_one(f"#{pid}")
        focusable = [w for w in panel.query("*") if w.can_focus and w.display]
        if focusable:
            focusable[0].focus()
        # Hidden panels are refreshed like visible ones: nothing to recompute here.

    # -- refresh --------------------------------------------------------------------------------
    def state(self) -> str:
        src = self.source
        if self.kind != "live":
            return self.kind
        if not src.connected:
            return "disconnected"
        if src.read_only:
            return "read-only"
        return "running" if src.running else "paused"

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
                for ev in events:
                    if ev.cc in (0x161, 0x162, 0x165):
                        self.gap.feed(ev)
            marks = rec.marks[self._seen_marks:]
            self._seen_marks += len(marks)
            if events or marks:
                self._ingest_stream(events, marks)
        self._notify_boundaries()
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
        if needle:
            events = [e for e in events[-STREAM_INGEST * 4:] if needle in e.origin or needle in e.name.lower()]
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
        if self.kind == "live":
            self._stats_dirty = True
            self._refresh_stats()
            self._refresh_handles()
        elif self.kind == "replay":
            self._refresh_replay()
        self._refresh_header()

    def _total_ops(self, accounts: dict) -> int:
        return sum(getattr(a, "ops", 0) for a in accounts.values())

    def _refresh_stats(self) -> None:
        src = self.source
        if not self._stats_dirty and self._ops_per_s == 0.0:
            return
        self._stats_dirty = False
        accounts = src.accounts()
        runs = runs_from_accounts(accounts)
        self._ops_per_s = self.ops_rate.add(self._total_ops(accounts))
        current = next((r for r in runs if r.key == (src.engine, src.mode, src.op)), None)
        modes = self.query_one(ModesPanel)
        if src.boundaries:
            # The recorder's per-command histograms span every TPM life; the engine's accounts
            # are per period. After a boundary, show the current period's own figures.
            since = time.strftime("%H:%M:%S", time.localtime(src.boundaries[-1][0]))
            rows = command_rows_run(current) if current else []
            subtitle = f"this TPM period only (since {since}), {src.engine}/{src.mode}"
            earlier = sum(a.ops for p in src.periods for a in p.values())
            modes.border_subtitle = (f"since {since}; {len(src.periods)} earlier period"
                                     f"{'s' if len(src.periods) != 1 else ''} kept apart ({earlier} ops)")
        else:
            rows = command_rows_live(src.recorder, "workload")
            subtitle = "workload commands, all modes since reset"
            if not rows:
                rows = command_rows_live(src.recorder, None)
                subtitle = "all origins (no workload yet)"
        self.query_one(LatencyPanel).show(op_rows(current) + rows, subtitle, f"{src.engine}/{src.mode}")
        modes.show(comparison(runs, src.op, MODES), src.op, (src.engine, src.mode))

    def _refresh_handles(self) -> None:
        src = self.source
        rec = src.recorder
        rows = self.book.rows(rec.handle_uses(), rec.owned_handles(), time.perf_counter_ns())
        self.query_one(HandlesPanel).show(rows)
        if self.poll is not None:
            ident = src.identity
            transient = sum(1 for e in self.poll.entries if e.kind == "transient")
            self.query_one(ResourcesPanel).show(gauges(self.poll.var, ident.fixed if ident else {},
                                                       self.gap.gap, transient))

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

    def _refresh_replay(self) -> None:
        src = self.source
        run = src.current_run()
        self.query_one(LatencyPanel).show(op_rows(run) + (command_rows_run(run) if run else []),
                                          f"run {src.engine}/{src.mode}/{src.op} · {run.ops if run else 0} ops",
                                          f"{src.engine}/{src.mode}")
        self.query_one(ModesPanel).show(comparison(src.runs, src.op, MODES), src.op, (src.engine, src.mode))
        stream = self.query_one(StreamPanel)
        if not stream.buffer:
            stream.add(src.stream)
            if not src.stream:
                stream.border_subtitle = "the capture has no events"

    def _refresh_header(self) -> None:
        src = self.source
        st = self.state()
        if self.kind == "live":
            ident = src.identity
            identity = f"{ident.manufacturer} {ident.vendor} fw {ident.firmware}" if ident else "…"
            rate = "rate max" if src.rate == 0 else f"rate {src.rate:g}/s"
            extra = f"poll {src.poll_interval:g} s"
            if st == "disconnected":
                extra = f"retrying: {src.last_error or ''}"[:80]
            marker = ""
            if st == "paused" and src.pause_reason:
                marker = src.pause_reason
            elif src.boundaries:
                marker = f"TPM period {len(src.boundaries) + 1}"
            self.query_one(StatusHeader).show(
                state=st, identity=identity, tcti=src.tcti, simulated=src.simulated, engine=src.engine,
                mode=src.mode, op=src.op, ops_per_s=self._ops_per_s, rate=rate, extra=extra,
                profile=src.profile, marker=marker)
        elif self.kind == "replay":
            t = src.tpm
            identity = f"{t.get('manufacturer', '?')} {t.get('vendor', '')} fw {t.get('firmware', '?')}"
            host = src.host
            self.query_one(StatusHeader).show(
                state="replay", identity=identity, tcti=src.tcti, simulated=bool(t.get("simulated")),
                engine=src.engine, mode=src.mode, op=src.op, ops_per_s=None,
                extra=f"{src.path.name} · {src.created} · {host.get('hostname', '?')} {host.get('kernel', '')}",
                profile=str(t["profile"]) if t.get("profile") else None)
        else:
            self.query_one(StatusHeader).show(
                state="passive", identity="kernel TPM (not contacted)", tcti=src.tcti, simulated=False,
                engine="-", mode="-", op="-", ops_per_s=None, extra="no TPM traffic")

    # -- worker results ---------------------------------------------------------------------------
    def on_poll_done(self, message: m.PollDone) -> None:
        self.poll = message.result
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
        interval = 1.0 if self.kind == "passive" else 5.0
        # PCR files make the kernel send PCR_Read: every 5th reading only.
        self.set_timer(interval, lambda: self.read_sysfs(self._sysfs_reads % 5 == 0))

    def on_handles_flushed(self, message: m.HandlesFlushed) -> None:
        for h in message.handles:
            self.book.forget(h)
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
        # Textual 8: False hides the binding, None shows it disabled.
        src = self.source
        if action in SELECTS_RUN:
            if self.kind == "passive":
                return False
            return True if self.kind == "replay" or not src.read_only else None
        if action in LIVE_ONLY:
            if self.kind != "live":
                return False  # nothing to act on in replay or --passive
            if action in CHANGES_TPM or action == "rate":
                if src.read_only or not src.connected:
                    return None
            if action == "flush_selected":
                return True if self.query_one(HandlesPanel).selected is not None else None
            if action == "export":
                return True if src.identity is not None else None
        if action in ("toggle_stream", "filter_stream") and self.kind == "passive":
            return False
        return True

    def _changed(self) -> None:
        """After a key changed what is shown: the header now, the tables at the next tick
        (recomputing every percentile here would hold the key's screen update back)."""
        self.refresh_bindings()
        if self.kind == "live":
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
        if self.kind == "replay":
            values = tuple(src.values(what)) or values
        cur = getattr(src, what)
        nxt = values[(values.index(cur) + 1) % len(values)] if cur in values else values[0]
        self._choose(**{what: nxt})

    def _choose(self, **kw) -> None:
        src = self.source
        if self.kind == "replay":
            if not src.choose(**kw):
                self.notify(f"the capture has no run with {kw}", severity="warning", timeout=3)
        else:
            src.choose(**kw)
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

    def action_flush_ours(self) -> None:
        self.flush_handles(None)

    def action_reset_stats(self) -> None:
        self.source.reset_stats()
        self.ops_rate.reset()
        stream = self.query_one(StreamPanel)
        stream.clear()
        self._seen_total = -1
        self._seen_marks = len(self.source.recorder.marks)
        self.refresh_all()
        self.notify("statistics reset", timeout=2)

    def action_export(self) -> None:
        self.export_capture()

    def action_toggle_stream(self) -> None:
        frozen = self.query_one(StreamPanel).toggle()
        self.notify("stream frozen (recording goes on)" if frozen else "stream follows", timeout=2)

    def action_filter_stream(self) -> None:
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

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    def action_quit(self) -> None:
        self.app.exit()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "handles-table":
            self.refresh_bindings()
