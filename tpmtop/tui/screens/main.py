"""The dashboard: header, observer-effect banner, the panels of :mod:`tpmtop.tui.panels`, footer.

The screen places widgets and hands each its part of a frame; the state behind the frames
(books, peaks, meters, alerts) is the view-model's (:class:`tpmtop.viewmodel.dashboard.Dashboard`).
Refresh model: a 5 Hz interval asks the view-model for a frame (it reads the recorder's
*current state*, never one message per TPM command); nothing happens while a modal screen is
up. Polls are one-shot timers re-armed after each poll. Below 110×32 the panels become tabs.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.events import Key, Resize
from textual.widgets import DataTable, Static, Tabs

from tpmtop import settings
from tpmtop.tui import messages as m
from tpmtop.tui.availability import KEY_ACTIONS, allowed, refused_why
from tpmtop.tui.panels import PANELS, available
from tpmtop.tui.screens.layout import apply_layout, compose_main, focus_first
from tpmtop.tui.screens.main_actions import KeyActions, key_action, main_bindings
from tpmtop.tui.screens.poller import PollChain
from tpmtop.tui.screens.refresh import RefreshClock
from tpmtop.tui.screens.workers import TpmWorkers
from tpmtop.tui.widgets.backdrop import BackdropScreen
from tpmtop.tui.widgets.header import StatusHeader
from tpmtop.tui.widgets.modes import ModesPanel
from tpmtop.tui.widgets.panel import Panel
from tpmtop.tui.widgets.stream import StreamPanel, StreamView
from tpmtop.viewmodel.commands import Capabilities, Source
from tpmtop.viewmodel.dashboard import Dashboard
from tpmtop.viewmodel.frame import Frame

RETRY_S = 2.0

OBSERVER = ("[b $warning]Observer effect[/]: on Linux 6.12+ each command tpmtop sends to /dev/tpmrm0 "
            "ends the kernel's kept HMAC session, so the kernel's next PCR extend pays the whole "
            "session setup again. Polling every {interval:g} s; [b]--passive[/] sends nothing.")
class MainScreen(BackdropScreen):
    """Places the panels and hands each its part of a frame. Its keys' actions are
    :class:`KeyActions`' (each ``action_*`` here hands the key to it), its workers
    :class:`TpmWorkers`' (``jobs``), its refresh :class:`RefreshClock`'s: collaborators, not mixins."""

    BINDINGS = main_bindings()

    def __init__(self, source: Source, export_dir: str | None = None, refresh_s: float | None = None) -> None:
        """``refresh_s``: the refresh interval to start with (None: the refresh_s setting)."""
        super().__init__()
        self.dash = Dashboard(source, {p.id: p.build for p in PANELS if p.build is not None})
        self.jobs = TpmWorkers(self, self.dash, export_dir)
        self.actions = KeyActions(self, self)
        # looked up at each call, not bound now: a test (or a subclass) may replace show
        self.clock = RefreshClock(self, self.dash, lambda: self.draw_tick(), lambda frame: self.show(frame),
                                  settings.current().refresh_s if refresh_s is None else refresh_s)
        self.panels = available(source.caps)
        # At 80×24 one panel shows at a time: start on the timings (an empty Handles table
        # is a poor first screen), then what the source has.
        self.active_panel = "latency" if "latency" in self.panels else self.panels[0]
        self.compact = False
        self.polls = PollChain(self, self.jobs.poll_tpm)

    # -- the keys' actions: Textual looks a binding's action up on the screen; each is KeyActions' --
    action_toggle_workload = key_action(KeyActions.action_toggle_workload)
    action_rate = key_action(KeyActions.action_rate)
    action_next_mode = key_action(KeyActions.action_next_mode)
    action_next_engine = key_action(KeyActions.action_next_engine)
    action_next_op = key_action(KeyActions.action_next_op)
    action_set_mode = key_action(KeyActions.action_set_mode)
    action_set_engine = key_action(KeyActions.action_set_engine)
    action_set_op = key_action(KeyActions.action_set_op)
    action_flush_selected = key_action(KeyActions.action_flush_selected)
    action_inspect_selected = key_action(KeyActions.action_inspect_selected)
    action_flush_ours = key_action(KeyActions.action_flush_ours)
    action_show_tcti = key_action(KeyActions.action_show_tcti)
    action_sort_table = key_action(KeyActions.action_sort_table)
    action_next_panel = key_action(KeyActions.action_next_panel)
    action_refresh_rate = key_action(KeyActions.action_refresh_rate)
    action_reset_stats = key_action(KeyActions.action_reset_stats)
    action_export = key_action(KeyActions.action_export)
    action_toggle_stream = key_action(KeyActions.action_toggle_stream)
    action_stream_scroll = key_action(KeyActions.action_stream_scroll)
    action_stream_page = key_action(KeyActions.action_stream_page)
    action_filter_stream = key_action(KeyActions.action_filter_stream)
    action_next_theme = key_action(KeyActions.action_next_theme)
    action_show_boot = key_action(KeyActions.action_show_boot)
    action_show_projection = key_action(KeyActions.action_show_projection)
    action_help = key_action(KeyActions.action_help)
    action_show_messages = key_action(KeyActions.action_show_messages)
    action_quit = key_action(KeyActions.action_quit)

    @property
    def refresh_s(self) -> float:
        return self.clock.refresh_s

    @property
    def caps(self) -> Capabilities:
        return self.dash.caps

    # -- layout ---------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield from compose_main(self.panels, self.active_panel)

    def on_mount(self) -> None:
        cmds, caps = self.dash.commands, self.caps
        banner = self.query_one("#observer", Static)
        if caps.handles and cmds.kernel_device:
            banner.update(OBSERVER.format(interval=cmds.poll_interval))
        else:
            banner.display = False
        self.query_one(StatusHeader).tooltip = self.dash.header().info.tooltip
        self.set_class(self.panels == ["system"], "-sysfs-only")
        if caps.handles:
            self.polls.now()
        if caps.workload:
            self.jobs.run_workload()
        if caps.live:
            self.clock.start()
        if caps.sysfs:
            self.jobs.read_sysfs(True)
        self._focus_panel(self.active_panel)
        self._apply_layout()
        self.refresh_all()

    def on_resize(self, event: Resize) -> None:
        self._apply_layout()

    def _apply_layout(self) -> None:
        self.compact = apply_layout(self, self.panels, self.active_panel)

    def _focus_panel(self, pid: str) -> None:
        focus_first(self.query_one(f"#{pid}"))

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
        seconds = self.clock.step(step)
        if self.caps.live:
            self.show(self.dash.tick_header())
        return seconds

    def tick(self) -> None:
        self.clock.tick()

    def draw_tick(self) -> None:
        """A refresh's frame (the clock chose when); none once the app is closing (its
        widgets are being removed while a refresh waited for the workload's gap)."""
        if not self.app.is_running or not self.query(StreamPanel):
            return
        stream = self.query_one(StreamPanel)
        width = self.query_one(ModesPanel).content_size.width
        self.show(self.dash.tick(stream_filter=None if stream.frozen else stream.needle, modes_width=width,
                                 compact=self.compact, stats_elsewhere=True))
        if self.dash.stats_due and not self.jobs.running("stats"):
            # Percentiles of every histogram: up to ~100 ms of Python under load, on a worker
            # so that a key pressed meanwhile is handled at once (benchmarks/ui_load.py).
            self.dash.stats_due = False
            self.jobs.compute_stats(width)

    def show(self, frame: Frame) -> None:
        """Each panel draws its part; the header and the notices are the screen's."""
        if frame.header is not None:
            h = frame.header.info
            extra = f"{h.extra}  refresh {self.refresh_s:g} s" if self.caps.live and h.extra else h.extra
            self.query_one(StatusHeader).show(
                state=h.state, identity=h.identity, tcti=h.tcti, simulated=h.simulated, engine=h.engine,
                mode=h.mode, op=h.op, ops_per_s=frame.header.ops_per_s, rate=h.rate, extra=extra,
                profile=h.profile, marker=h.marker, cpu=frame.header.cpu, simulated_reason=h.simulated_reason,
                vs_none=frame.header.vs_none)
        for p in PANELS:
            part = p.part_of(frame)
            if part is not None:
                self.query_one(f"#{p.id}", Panel).show_part(part)
        if frame.clients is not None:
            self._apply_layout()  # Clients shows only when someone holds the device
        for n in frame.notices:
            self.notify(n.text, title=n.title, severity=n.severity.value, timeout=n.timeout)

    def refresh_all(self) -> None:
        self.show(self.dash.first(self.query_one(ModesPanel).content_size.width))

    # -- keys: refused ones say why (tpmtop.tui.availability) -------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Textual 8: False hides the binding, None shows it disabled. A key refused here is
        # explained by on_key (a notification), never ignored silently.
        return allowed(action, self.caps, self.dash.commands, self.actions)

    def on_key(self, event: Key) -> None:
        """A key whose action makes no sense here says why instead of doing nothing."""
        binding = KEY_ACTIONS.get(event.key)
        if binding is None or self.app.screen is not self:
            return
        name = binding.split("(")[0]
        if allowed(name, self.caps, self.dash.commands, self.actions):
            return
        event.stop()
        self.notify(refused_why(name, self.caps, self.dash.commands), title="not available", severity="warning",
                    timeout=4)

    def on_stream_view_decode_requested(self, event: StreamView.DecodeRequested) -> None:
        self.actions.decode_requested(event)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "handles-table":  # Enter on a handle: inspect it
            self.actions.action_inspect_selected()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "handles-table":
            self.refresh_bindings()

    # -- worker results ---------------------------------------------------------------------------
    def on_poll_done(self, message: m.PollDone) -> None:
        self.polls.finished(self.dash.commands.poll_interval)
        self.clock.apply_or_wait(message)

    def on_stats_ready(self, message: m.StatsReady) -> None:
        self.clock.apply_or_wait(message)

    def on_poll_failed(self, message: m.PollFailed) -> None:
        self.notify(message.error, title="poll failed", severity="warning", timeout=5)
        self.polls.finished(max(self.dash.commands.poll_interval, RETRY_S))

    def on_disconnected(self, message: m.Disconnected) -> None:
        self.show(self.dash.on_lost(message.error))
        # Both the poller and the workload may report the same loss; the poll chain tries
        # again (reconnecting) once, RETRY_S on.
        if message.from_poll:
            self.polls.finished(RETRY_S)
        else:
            self.polls.later(RETRY_S)

    def on_reconnected(self, message: m.Reconnected) -> None:
        self.show(self.dash.on_reconnected())
        self.jobs.run_workload()

    def on_sysfs_read(self, message: m.SysfsRead) -> None:
        rate = self.dash.on_sysfs(message.snapshot)
        self.show(Frame(system=(message.snapshot, rate)))
        self.jobs.read_sysfs_later(beside_tpm=self.caps.handles)

    def on_handles_flushed(self, message: m.HandlesFlushed) -> None:
        self.show(self.dash.on_flushed(message.handles, message.only_ours))
        self.polls.now()  # confirm from the TPM's own list

    def on_action_failed(self, message: m.ActionFailed) -> None:
        self.notify(message.error, title=f"{message.what} failed", severity="error", timeout=8)

    def on_capture_exported(self, message: m.CaptureExported) -> None:
        exported = getattr(self.app, "exported", None)
        if isinstance(exported, list):
            exported.append(str(message.path))
        self.notify(f"{message.path}", title="capture written", timeout=10)

    def on_handle_inspected(self, message: m.HandleInspected) -> None:
        from tpmtop.tui.screens.inspect import InspectScreen

        self.app.push_screen(InspectScreen(message.title, message.rows))
