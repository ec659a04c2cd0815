"""What the main screen's keys do (tpmtop.tui.actions has the table of them). Each asks the
view-model (``self.dash``) or a worker; refused keys say why (tpmtop.tui.availability)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.events import Key
from textual.widgets import DataTable

from tpmtop.sessions.modes import ENGINES, MODES, OPS
from tpmtop.tui.actions import ACTIONS
from tpmtop.tui.availability import KEY_ACTIONS, allowed, refused_why
from tpmtop.tui.screens.workers import TpmWorkers
from tpmtop.tui.widgets.handles import HandlesPanel
from tpmtop.tui.widgets.stream import StreamPanel, StreamView
from tpmtop.tui.widgets.table import KeyedTable

if TYPE_CHECKING:
    from tpmtop.sources.protocol import Capabilities
    from tpmtop.viewmodel.dashboard import Dashboard
    from tpmtop.viewmodel.frame import Frame

FLUSHABLE_TOPS = (0x80, 0x02, 0x03)  # transient objects, HMAC and policy sessions
KIND_WORDS = {"transient": "transient object", "loaded-session": "loaded session", "saved-session": "saved session"}


class MainActions(TpmWorkers):
    """A part of :class:`~tpmtop.tui.screens.main.MainScreen` (with its workers)."""

    dash: Dashboard
    compact: bool
    active_panel: str
    panels: list[str]

    if TYPE_CHECKING:  # MainScreen's
        @property
        def caps(self) -> Capabilities: ...
        def show(self, frame: Frame) -> None: ...
        def refresh_all(self) -> None: ...
        def workers_in_group(self, group: str) -> bool: ...
        def action_show_panel(self, pid: str) -> None: ...
        def set_refresh(self, step: int) -> float: ...

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Textual 8: False hides the binding, None shows it disabled. A key refused here is
        # explained by on_key (a notification), never ignored silently.
        return allowed(action, self.caps, self.dash.source, self)

    def on_key(self, event: Key) -> None:
        """A key whose action makes no sense here says why instead of doing nothing."""
        binding = KEY_ACTIONS.get(event.key)
        if binding is None or self.app.screen is not self:
            return
        name = binding.split("(")[0]
        if allowed(name, self.caps, self.dash.source, self):
            return
        event.stop()
        self.notify(refused_why(name, self.caps, self.dash.source), title="not available", severity="warning",
                    timeout=4)

    def _changed(self) -> None:
        """After a key changed what is shown: the header now, the tables at the next tick."""
        self.refresh_bindings()
        if self.caps.live:
            self.dash.changed()
            self.show(self.dash.tick_header())
        else:
            self.refresh_all()

    def action_toggle_workload(self) -> None:
        if self.dash.toggle_workload() and not self.workers_in_group("workload"):
            self.run_workload()
        self.show(self.dash.tick_header())

    def action_rate(self, direction: int) -> None:
        rate = self.dash.rate(direction)
        self.notify("as fast as the TPM allows" if rate == 0 else f"{rate:g} operations/s", title="rate", timeout=2)
        self.show(self.dash.tick_header())

    def _choose(self, **kw: str) -> None:
        if not self.dash.choose(**kw):
            self.notify(f"the capture has no run with {kw}", severity="warning", timeout=3)
        self._changed()

    def action_next_mode(self) -> None:
        self._choose(mode=self.dash.next_value("mode", MODES))

    def action_next_engine(self) -> None:
        self._choose(engine=self.dash.next_value("engine", ENGINES))

    def action_next_op(self) -> None:
        self._choose(op=self.dash.next_value("op", OPS))

    def action_set_mode(self, mode: str) -> None:
        self._choose(mode=mode)

    def action_set_engine(self, engine: str) -> None:
        self._choose(engine=engine)

    def action_set_op(self, op: str) -> None:
        self._choose(op=op)

    def selected_handle(self) -> int | None:
        return self.query_one(HandlesPanel).selected

    def action_flush_selected(self) -> None:
        from tpmtop.tui.screens.confirm import ConfirmScreen
        from tpmtop.viewmodel.rows.handles import HandleState

        row = self.query_one(HandlesPanel).selected_row()
        if row is None or row.state is HandleState.GONE:
            self.notify("select a handle the TPM still lists", severity="warning", timeout=3)
            return
        if row.handle >> 24 not in FLUSHABLE_TOPS:
            self.notify(f"{row.key} is a {row.kind}: tpmtop flushes only transient objects and sessions",
                        severity="warning", timeout=5)
            return
        if row.ours:
            self.flush_handles([row.handle])
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.flush_handles([row.handle])

        from tpmtop.textsafe import safe
        from tpmtop.viewmodel.rows.handles import HandleOwner

        holder = (f"created by {safe(row.created_by)}, through tpmtop's proxy" if row.owner is HandleOwner.CLIENT
                  else "held by another program (or the kernel): tpmtop did not see it created")
        self.app.push_screen(ConfirmScreen(
            f"Flush {row.key}? tpmtop did not create it.",
            f"It is a {KIND_WORDS.get(row.kind, row.kind)} {holder}; flushing it breaks that program's next "
            "command."), answered)

    def action_inspect_selected(self) -> None:
        from tpmtop.textsafe import safe
        from tpmtop.viewmodel.rows.handles import HandleOwner, HandleState

        row = self.query_one(HandlesPanel).selected_row()
        if row is None or row.state is HandleState.GONE:
            self.notify("select a handle the TPM still lists (keys 1, then the arrows)", severity="warning", timeout=3)
            return
        self.inspect_handle(row.handle, row.kind, row.ours,
                            safe(row.created_by) if row.owner is HandleOwner.CLIENT else None)

    def action_flush_ours(self) -> None:
        self.flush_handles(None)

    def action_show_tcti(self) -> None:
        text, title, timeout, copy = self.dash.tcti_hint()
        if copy:
            self.app.copy_to_clipboard(copy)
        self.notify(text, title=title, timeout=timeout)

    def action_sort_table(self, step: int = 1) -> None:
        table = self.focused if isinstance(self.focused, KeyedTable) else None
        if table is None:
            self.notify("focus a table first (1 Handles, 3 Latency)", severity="warning", timeout=3)
            return
        table.cycle_sort(step)  # the header marks the column (▼)

    def action_next_panel(self, step: int) -> None:
        """Tab / Shift-Tab: the next panel's tab in compact mode, the next widget otherwise."""
        if not self.compact:
            self.focus_next() if step > 0 else self.focus_previous()
            return
        i = self.panels.index(self.active_panel) if self.active_panel in self.panels else 0
        self.action_show_panel(self.panels[(i + step) % len(self.panels)])

    def action_refresh_rate(self, step: int) -> None:
        seconds = self.set_refresh(step)
        self.notify(f"the screen refreshes every {seconds:g} s", title="refresh", timeout=2)

    def action_reset_stats(self) -> None:
        self.dash.reset()
        self.query_one(StreamPanel).clear()
        self.refresh_all()
        self.notify("statistics reset", timeout=2)

    def action_export(self) -> None:
        from tpmtop.sources.export_file import export_target

        # The name is chosen here (a few stat calls) so the full path shows at once; the
        # capture itself takes seconds with many events and is written by a worker.
        try:
            target = export_target(self.export_dir)
        except OSError as e:
            where = e.filename or self.export_dir or "the data directory"
            self.notify(f"cannot write captures in {where}: {e.strerror or e}", title="export failed",
                        severity="error", timeout=8)
            return
        self.notify(f"writing {target}", title="export", timeout=10)
        self.export_capture(target)

    def on_stream_view_decode_requested(self, event: StreamView.DecodeRequested) -> None:
        from tpmtop.tui.screens.decode import DecodeScreen

        self.app.push_screen(DecodeScreen(self.dash.source, event.row))

    def action_toggle_stream(self) -> None:
        panel = self.query_one(StreamPanel)
        frozen = panel.toggle(self.dash.stream_snapshot() if not panel.frozen else None)
        self.notify("stream frozen (recording goes on)" if frozen else "stream follows", timeout=2)

    def action_filter_stream(self) -> None:
        """``/``: a filter line in the focused table's panel (Handles, Latency), else the stream's."""
        from tpmtop.tui.screens.filter import PanelFilter

        if self.query(PanelFilter):
            return  # one open at a time: the open one has the keys
        table = self.focused if isinstance(self.focused, KeyedTable) else None
        if table is not None:
            from textual.widget import Widget

            panel = next((a for a in table.ancestors if isinstance(a, Widget) and a.has_class("panel")), None)
            if panel is None:
                return

            def done(needle: str | None) -> None:
                if needle is not None:
                    table.set_filter(needle)  # the panel's subtitle names it at its next refresh
                    self.refresh_all()

            panel.mount(PanelFilter(panel.id or "", table.needle, done, "table-filter"), before=0)
            return
        if self.compact and self.active_panel != "stream":
            self.action_show_panel("stream")
        stream = self.query_one(StreamPanel)

        def stream_done(needle: str | None) -> None:
            if needle is not None:
                stream.set_filter(needle)

        stream.mount(PanelFilter("stream", stream.needle, stream_done, "stream-filter"), before=0)

    def action_next_theme(self) -> None:
        from tpmtop.tui.themes import CyclesThemes

        if isinstance(self.app, CyclesThemes):
            self.app.cycle_theme()

    def action_show_boot(self) -> None:
        # Installed once: the report is built the first time only ('r' on that screen rebuilds).
        if not self.app.is_screen_installed("boot"):
            from tpmtop.tui.screens.boot import BootScreen

            self.app.install_screen(BootScreen(getattr(self.app, "boot_root", "/")), "boot")
        self.app.push_screen("boot")

    def action_show_projection(self) -> None:
        from tpmtop.tui.screens.projection import MISSING_LIVE, ProjectionScreen

        def done(new_n: int | None) -> None:
            if new_n is not None:
                self.dash.set_boot_n(new_n)

        self.app.push_screen(ProjectionScreen(*self.dash.projection(MISSING_LIVE)), done)

    def action_help(self) -> None:
        from tpmtop.tui.screens.help import HelpScreen

        # Keys this source can never act on (False, not "not now") are named, not listed as keys.
        never = frozenset(a.action for a in ACTIONS
                          if allowed(a.action.split("(")[0], self.caps, self.dash.source, self) is False)
        # Built once per content and width, then kept installed: composing the help (markup,
        # wrapping, a new screen's styles) took 0.2-0.5 s of each ? under load.
        args = (never, self.caps.why_not if never else "", tuple(self.panels))
        name = f"help-{self.app.size.width}-{abs(hash(args)):x}"
        if not self.app.is_screen_installed(name):
            self.app.install_screen(HelpScreen(*args), name)
        self.app.push_screen(name)

    def action_show_messages(self) -> None:
        from tpmtop.tui.widgets.messages import open_log

        open_log(self.app)

    def action_quit(self) -> None:
        self.app.exit()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "handles-table":  # Enter on a handle: inspect it
            self.action_inspect_selected()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "handles-table":
            self.refresh_bindings()
