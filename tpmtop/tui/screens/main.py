"""The dashboard: header, observer-effect banner, the panels of :mod:`tpmtop.tui.panels`, footer.

The screen places widgets and hands each its part of a frame; the state behind the frames
(books, peaks, meters, alerts) is the view-model's (:class:`tpmtop.viewmodel.dashboard.Dashboard`).
Refresh model: a 5 Hz interval asks the view-model for a frame (it reads the recorder's
*current state*, never one message per TPM command); nothing happens while a modal screen is
up. Polls are one-shot timers re-armed after each poll. Below 110×32 the panels become tabs.
"""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.binding import Binding
from textual.events import Resize
from textual.reactive import Reactive
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Static, Tab, Tabs

from tpmtop.sources.protocol import Capabilities, Source, UiHold
from tpmtop.tui import messages as m
from tpmtop.tui.actions import ACTIONS
from tpmtop.tui.panels import CONTAINERS, PANELS, Group, available
from tpmtop.tui.screens.main_actions import MainActions
from tpmtop.tui.settled import after_frame
from tpmtop.tui.widgets.backdrop import BackdropScreen, Column, Row
from tpmtop.tui.widgets.footer import KeyBar
from tpmtop.tui.widgets.header import StatusHeader
from tpmtop.tui.widgets.messages import MessageLine
from tpmtop.tui.widgets.modes import ModesPanel
from tpmtop.tui.widgets.panel import Panel
from tpmtop.tui.widgets.stream import StreamPanel
from tpmtop.tui.widgets.system import SystemPanel
from tpmtop.viewmodel.dashboard import Dashboard
from tpmtop.viewmodel.frame import Frame

REFRESH_S = 0.2  # ≤ 10 refreshes a second, as the issue asks; 5 keeps a paused dashboard idle
REFRESH_STEPS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)  # [ and ] move along these (htop's delay, live)
RETRY_S = 2.0
# A refresh due while the workload's operation is under way looks again this often for its end,
# and draws anyway after the longest (a slow chip's operation takes 150 ms: tpmtop.profiles).
QUIET_POLL_S = 0.002
QUIET_WAIT_MAX_S = 0.05
COMPACT_W, COMPACT_H = 110, 32
NARROW_W = 120  # below: the footer shows only the essential keys

OBSERVER = ("[b $warning]Observer effect[/]: on Linux 6.12+ each command tpmtop sends to /dev/tpmrm0 "
            "ends the kernel's kept HMAC session, so the kernel's next PCR extend pays the whole "
            "session setup again. Polling every {interval:g} s; [b]--passive[/] sends nothing.")
KEY_DISPLAY = {"question_mark,f1": "?", "plus": "+", "minus": "-", "slash": "/", "greater_than_sign": ">",
               "less_than_sign": "<", "left_square_bracket": "[", "right_square_bracket": "]", "q,f10": "q"}


def _bindings() -> list[Binding | tuple[str, str] | tuple[str, str, str]]:
    out: list[Binding | tuple[str, str] | tuple[str, str, str]] = [
        Binding(a.key, a.action, a.label, show=a.show, tooltip=a.help, id=a.id, key_display=KEY_DISPLAY.get(a.key))
        for a in ACTIONS]
    out += [Binding(p.key, f"show_panel('{p.id}')", p.title, show=False, id=f"panel-{p.id}",
                    tooltip=f"Show the {p.title} panel") for p in PANELS]
    # Tab did nothing below 110×32 (one panel shown, nothing else to focus): there it turns the tab.
    out += [Binding("tab", "next_panel(1)", "Next panel", show=False, id="next-panel",
                    tooltip="The next panel (a tab below 110×32)"),
            Binding("shift+tab", "next_panel(-1)", "Previous panel", show=False, id="previous-panel",
                    tooltip="The previous panel")]
    return out


class MainScreen(MainActions, BackdropScreen):
    BINDINGS = _bindings()
    # Textual repaints the whole screen on every focus change (its `focused` repaints); the
    # widgets whose looks depend on the focus (the focused panel's border, a table's cursor) are
    # restyled and refreshed by the focus change itself. A full repaint is ~20 ms of Python at
    # 140x44: each of 1-7 and Tab cost that twice over under load (benchmarks/ui_load.py).
    focused: Reactive[Widget | None] = Reactive(None, repaint=False)

    def __init__(self, source: Source, export_dir: str | None = None) -> None:
        super().__init__()
        self.dash = Dashboard(source, {p.id: p.rows for p in PANELS if p.rows is not None})
        self.export_dir = export_dir
        self.panels = available(source.caps)
        # At 80×24 one panel shows at a time: start on the timings (an empty Handles table
        # is a poor first screen), then what the source has.
        self.active_panel = "latency" if "latency" in self.panels else self.panels[0]
        self.compact = False
        self._retry_armed = False
        self._sysfs_reads = 0
        self.refresh_s = REFRESH_S
        self._tick_timer: Timer | None = None
        self._tick_skipped = False  # the last tick gave way to a key (tick)
        self._quiet_since: float | None = None  # a refresh waits for the workload's gap since then
        self._waiting: list[m.PollDone | m.StatsReady] = []  # worker results, drawn by the next tick

    @property
    def source(self) -> Source:
        return self.dash.source

    @property
    def caps(self) -> Capabilities:
        return self.dash.caps

    # -- layout ---------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        yield Static(id="observer")
        yield Tabs(*[Tab(f"{p.key} {p.title}", id=f"tab-{p.id}") for p in PANELS if p.id in self.panels],
                   active=f"tab-{self.active_panel}", id="panel-tabs")

        def group(g: Group) -> ComposeResult:
            for p in PANELS:
                if p.group is g:
                    yield p.widget(id=p.id)

        with Column(id="body"):
            with Row(id="top"):
                with Column(id="left"):
                    yield from group(Group.LEFT)
                yield from group(Group.RIGHT)
            with Row(id="bottom"):
                yield from group(Group.BOTTOM)
        yield MessageLine(id="message-bar")
        yield KeyBar(id="keybar")

    def on_mount(self) -> None:
        src, caps = self.source, self.caps
        banner = self.query_one("#observer", Static)
        if caps.handles and src.kernel_device:
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
            self._tick_timer = self.set_interval(self.refresh_s, self.tick)
        if caps.sysfs:
            self.read_sysfs(True)
        self._focus_panel(self.active_panel)
        self._apply_layout()
        self.refresh_all()

    def on_resize(self, event: Resize) -> None:
        self._apply_layout()

    def _apply_layout(self) -> None:
        w, h = self.size
        self.compact = bool(w and h) and (w < COMPACT_W or h < COMPACT_H)
        self.set_class(self.compact, "-compact")
        self.set_class(bool(w) and w < NARROW_W, "-narrow")
        self.query_one("#panel-tabs").display = self.compact
        visible = set(self.panels) if not self.compact else {self.active_panel}
        for p in PANELS:
            panel = self.query_one(f"#{p.id}", Panel)
            panel.display = p.id in visible and (panel.has_content or self.compact)
        for cid, groups in CONTAINERS.items():
            self.query_one(f"#{cid}").display = any(p.id in visible for p in PANELS if p.group in groups)
        if self.compact:
            tabs = self.query_one("#panel-tabs", Tabs)
            if tabs.active != f"tab-{self.active_panel}":
                tabs.active = f"tab-{self.active_panel}"

    def _focus_panel(self, pid: str) -> None:
        panel = self.query_one(f"#{pid}")
        # A panel with nothing focusable inside (Resources, Modes, System) takes the focus itself:
        # its key then visibly lands on it (the focused border), also when every panel shows.
        focusable = [w for w in panel.query("*") if w.can_focus and w.display] or [panel] * panel.can_focus
        if focusable:
            focusable[0].focus()

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
        self._focus_panel(pid)  # hidden panels are refreshed like visible ones: nothing to recompute

    def set_refresh(self, step: int) -> float:
        """[ / ]: the screen's refresh interval, one step longer (1) or shorter (-1)."""
        i = min(range(len(REFRESH_STEPS)), key=lambda k: abs(REFRESH_STEPS[k] - self.refresh_s))
        self.refresh_s = REFRESH_STEPS[max(0, min(len(REFRESH_STEPS) - 1, i + step))]
        if self._tick_timer is not None:
            self._tick_timer.stop()
            self._tick_timer = self.set_interval(self.refresh_s, self.tick)
        if self.caps.live:
            self.show(self.dash.tick_header())
        return self.refresh_s

    # -- frames ---------------------------------------------------------------------------------
    def tick(self) -> None:
        """The interval's refresh. With a workload running it waits for the end of the operation
        under way, then draws while the workload waits (sources' hold_for_ui): an operation
        that ran meanwhile waited for the GIL after each round trip, and the refresh's
        milliseconds showed in the Latency panel as the TPM's own tail (op p99 5.4-9.0 ms
        against 1.1-2.3 ms without the dashboard; benchmarks/refresh_tail.py)."""
        if self.app.screen is not self or self._quiet_since is not None:
            return  # a modal is up (nothing visible to refresh), or this refresh already waits
        if not self._tick_skipped and self._key_in_flight():
            # A key's screen is being drawn: this refresh (5 ms of the UI thread, up to 20 under
            # load) waits for the next tick rather than add to it. Once: keys held down repeat.
            self._tick_skipped = True
            return
        self._tick_skipped = False
        if self.caps.workload:
            self.source.hold_for_ui(UiHold.REFRESH)  # a burst under way stops after this operation
            if self.source.workload_busy():
                self._quiet_since = time.monotonic()
                self.set_timer(QUIET_POLL_S, self._tick_when_quiet)
                return
        self._draw_tick()

    def _tick_when_quiet(self) -> None:
        if self.source.workload_busy() and time.monotonic() - (self._quiet_since or 0.0) < QUIET_WAIT_MAX_S:
            self.set_timer(QUIET_POLL_S, self._tick_when_quiet)
            return
        self._quiet_since = None
        if self.app.screen is not self:
            self.source.release_for_ui(UiHold.REFRESH)
            return
        self._draw_tick()

    def _draw_tick(self) -> None:
        waiting, self._waiting = self._waiting, []
        for message in waiting:
            self._apply(message)
        stream = self.query_one(StreamPanel)
        width = self.query_one(ModesPanel).content_size.width
        self.show(self.dash.tick(stream_filter=None if stream.frozen else stream.needle, modes_width=width,
                                 compact=self.compact, stats_elsewhere=True))
        if self.dash.stats_due and not self.workers_in_group("stats"):
            # Percentiles of every histogram: up to ~100 ms of Python under load, on a worker
            # so that a key pressed meanwhile is handled at once (benchmarks/ui_load.py).
            self.dash.stats_due = False
            self.compute_stats(width)
        if self.caps.workload:
            # after the frame this refresh drew (queued behind what it queued itself)
            self.call_next(self.call_after_refresh, after_frame, self, self._tick_drawn)

    def _tick_drawn(self) -> None:
        self.source.release_for_ui(UiHold.REFRESH)

    def show(self, frame: Frame) -> None:
        """Each panel draws its part; the header and the notices are the screen's."""
        if frame.header is not None:
            h = frame.header.info
            extra = f"{h.extra}  refresh {self.refresh_s:g} s" if self.caps.live and h.extra else h.extra
            self.query_one(StatusHeader).show(
                state=h.state, identity=h.identity, tcti=h.tcti, simulated=h.simulated, engine=h.engine,
                mode=h.mode, op=h.op, ops_per_s=frame.header.ops_per_s, rate=h.rate, extra=extra,
                profile=h.profile, marker=h.marker, cpu=frame.header.cpu)
        for p in PANELS:
            self.query_one(f"#{p.id}", Panel).show_frame(frame)
        if frame.clients is not None:
            self._apply_layout()  # Clients shows only when someone holds the device
        for n in frame.notices:
            self.notify(n.text, title=n.title, severity=n.severity.value, timeout=n.timeout)

    def refresh_all(self) -> None:
        self.show(self.dash.first(self.query_one(ModesPanel).content_size.width))

    def _key_in_flight(self) -> bool:
        in_flight = getattr(self.app, "key_in_flight", None)
        return in_flight is not None and bool(in_flight())

    # -- worker results ---------------------------------------------------------------------------
    # Where there are ticks, a result waits for the next one (a refresh interval at most):
    # drawn at once, it was a frame of its own in the middle of the workload's operations (see
    # tick), or landed in a key's frame (updating its tables is ~2 ms of the UI thread under
    # two busy loops).
    def on_poll_done(self, message: m.PollDone) -> None:
        self.set_timer(self.source.poll_interval, self.poll_tpm)
        self._apply_or_wait(message)

    def on_stats_ready(self, message: m.StatsReady) -> None:
        self._apply_or_wait(message)

    def _apply_or_wait(self, message: m.PollDone | m.StatsReady) -> None:
        if self._tick_timer is not None and self.app.screen is self:
            self._waiting.append(message)
        else:
            self._apply(message)

    def _apply(self, message: m.PollDone | m.StatsReady) -> None:
        if isinstance(message, m.PollDone):
            self.show(self.dash.on_poll(message.result))
        elif message.generation == self.dash.generation:  # else a key changed the run meanwhile
            self.show(Frame(self.dash.header(), stats=message.view))
        else:
            self.dash.changed()

    def on_poll_failed(self, message: m.PollFailed) -> None:
        self.notify(message.error, title="poll failed", severity="warning", timeout=5)
        self.set_timer(max(self.source.poll_interval, RETRY_S), self.poll_tpm)

    def on_disconnected(self, message: m.Disconnected) -> None:
        self.show(self.dash.on_lost(message.error))
        # Both the poller and the workload may report the same loss: re-arm the poller once.
        if not self.workers_in_group("poll") and not self._retry_armed:
            self._retry_armed = True
            self.set_timer(RETRY_S, self._retry)

    def _retry(self) -> None:
        self._retry_armed = False
        self.poll_tpm()

    def workers_in_group(self, group: str) -> bool:
        return any(w.group == group and not w.is_finished for w in self.app.workers)

    def on_reconnected(self, message: m.Reconnected) -> None:
        self.show(self.dash.on_reconnected())
        self.run_workload()

    def on_sysfs_read(self, message: m.SysfsRead) -> None:
        rate = self.dash.on_sysfs(message.snapshot)
        self.query_one(SystemPanel).show(message.snapshot, rate)
        self._sysfs_reads += 1
        interval = 5.0 if self.caps.handles else 1.0  # beside a live TPM, sysfs is secondary
        # PCR files make the kernel send PCR_Read: every 5th reading only.
        self.set_timer(interval, lambda: self.read_sysfs(self._sysfs_reads % 5 == 0))

    def on_handles_flushed(self, message: m.HandlesFlushed) -> None:
        self.show(self.dash.on_flushed(message.handles, message.only_ours))
        self.poll_tpm()  # confirm from the TPM's own list

    def on_action_failed(self, message: m.ActionFailed) -> None:
        self.notify(message.error, title=f"{message.what} failed", severity="error", timeout=8)

    def on_capture_exported(self, message: m.CaptureExported) -> None:
        self.last_export = message.path
        exported = getattr(self.app, "exported", None)
        if isinstance(exported, list):
            exported.append(str(message.path))
        self.notify(f"{message.path}", title="capture written", timeout=10)

    def on_handle_inspected(self, message: m.HandleInspected) -> None:
        from tpmtop.tui.screens.inspect import InspectScreen

        self.app.push_screen(InspectScreen(message.title, message.rows))
