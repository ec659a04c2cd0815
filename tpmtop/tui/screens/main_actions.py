"""What the main screen's keys do (tpmtop.tui.actions has the table of them). Each asks the
view-model (``screen.dash``) or a worker; refused keys say why (tpmtop.tui.availability)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from textual.binding import Binding
from textual.screen import Screen

from tpmtop.sessions.modes import ENGINES, MODES, OPS
from tpmtop.tui.actions import ACTIONS
from tpmtop.tui.availability import allowed
from tpmtop.tui.panels import PANELS
from tpmtop.tui.screens.host import MainHost
from tpmtop.tui.widgets.handles import HandlesPanel
from tpmtop.tui.widgets.stream import StreamPanel, StreamView
from tpmtop.tui.widgets.table import KeyedTable

KEY_DISPLAY = {"question_mark,f1": "?", "plus": "+", "minus": "-", "slash": "/", "greater_than_sign": ">",
               "less_than_sign": "<", "left_square_bracket": "[", "right_square_bracket": "]", "q,f10": "q"}


def main_bindings() -> list[Binding | tuple[str, str] | tuple[str, str, str]]:
    """The main screen's keys: the actions' table, a key per panel, Tab between panels."""
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
    # A frozen stream (s) scrolls with these whatever has focus; else they are the focused widget's.
    out += [Binding(key, action, show=False, priority=True, id=f"frozen-stream-{name}", tooltip=why)
            for key, action, name, why in (
                ("home", "stream_scroll(1_000_000)", "oldest", "The frozen stream's oldest command"),
                ("end", "stream_scroll(-1_000_000)", "newest", "The frozen stream's newest command"),
                ("pageup", "stream_page(1)", "page-back", "A page of older commands in the frozen stream"),
                ("pagedown", "stream_page(-1)", "page-forward", "A page of newer commands in the frozen stream"))]
    return out


FLUSHABLE_TOPS = (0x80, 0x02, 0x03)  # transient objects, HMAC and policy sessions
KIND_WORDS = {"transient": "transient object", "loaded-session": "loaded session", "saved-session": "saved session"}


class key_action:
    """``MainScreen.action_x = key_action(KeyActions.action_x)``: Textual looks a binding's action
    up on the screen; this hands it to the screen's :class:`KeyActions` (``screen.actions``).
    One line per key on the screen, each naming the method that does the work."""

    def __init__(self, method: Callable[..., None]) -> None:
        self.method = method

    def __get__(self, screen: HasKeyActions | None, owner: type | None = None) -> Callable[..., None]:
        if screen is None:
            return self.method
        bound: Callable[..., None] = self.method.__get__(screen.actions, KeyActions)
        return bound


class HasKeyActions(Protocol):
    actions: KeyActions


class KeyActions:
    """What the main screen's keys do: a collaborator of
    :class:`~tpmtop.tui.screens.main.MainScreen` (not a mixin), whose ``action_*`` methods
    hand each key here. Each asks the view-model (``screen.dash``) or a worker."""

    def __init__(self, screen: Screen[Any], host: MainHost) -> None:
        """``screen`` and ``host``: the main screen, as Textual's screen and as what the
        actions use of it beyond that (tpmtop.tui.screens.host)."""
        self.screen = screen
        self.host = host

    def selected_handle(self) -> int | None:
        return self.screen.query_one(HandlesPanel).selected

    def _changed(self) -> None:
        """After a key changed what is shown: the header now, the tables at the next tick."""
        self.screen.refresh_bindings()
        if self.host.caps.live:
            self.host.dash.changed()
            self.host.show(self.host.dash.tick_header())
        else:
            self.host.refresh_all()

    def action_toggle_workload(self) -> None:
        if self.host.dash.toggle_workload() and not self.host.jobs.running("workload"):
            self.host.jobs.run_workload()
        self.host.show(self.host.dash.tick_header())

    def action_rate(self, direction: int) -> None:
        rate = self.host.dash.rate(direction)
        self.screen.notify("as fast as the TPM allows" if rate == 0 else f"{rate:g} operations/s", title="rate",
                           timeout=2)
        self.host.show(self.host.dash.tick_header())

    def _choose(self, **kw: str) -> None:
        if not self.host.dash.choose(**kw):
            self.screen.notify(f"the capture has no run with {kw}", severity="warning", timeout=3)
        self._changed()

    def action_next_mode(self) -> None:
        self._choose(mode=self.host.dash.next_value("mode", MODES))

    def action_next_engine(self) -> None:
        self._choose(engine=self.host.dash.next_value("engine", ENGINES))

    def action_next_op(self) -> None:
        self._choose(op=self.host.dash.next_value("op", OPS))

    def action_set_mode(self, mode: str) -> None:
        self._choose(mode=mode)

    def action_set_engine(self, engine: str) -> None:
        self._choose(engine=engine)

    def action_set_op(self, op: str) -> None:
        self._choose(op=op)

    def action_flush_selected(self) -> None:
        from tpmtop.tui.screens.confirm import ConfirmScreen
        from tpmtop.viewmodel.rows.handles import HandleState

        row = self.screen.query_one(HandlesPanel).selected_row()
        if row is None or row.state is HandleState.GONE:
            self.screen.notify("select a handle the TPM still lists", severity="warning", timeout=3)
            return
        if row.handle >> 24 not in FLUSHABLE_TOPS:
            self.screen.notify(f"{row.key} is a {row.kind}: tpmtop flushes only transient objects and sessions",
                        severity="warning", timeout=5)
            return
        if row.ours:
            self.host.jobs.flush_handles([row.handle])
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.host.jobs.flush_handles([row.handle])

        from tpmtop.textsafe import safe
        from tpmtop.viewmodel.rows.handles import HandleOwner

        holder = (f"created by {safe(row.created_by)}, through tpmtop's proxy" if row.owner is HandleOwner.CLIENT
                  else "held by another program (or the kernel): tpmtop did not see it created")
        self.screen.app.push_screen(ConfirmScreen(
            f"Flush {row.key}? tpmtop did not create it.",
            f"It is a {KIND_WORDS.get(row.kind, row.kind)} {holder}; flushing it breaks that program's next "
            "command."), answered)

    def action_inspect_selected(self) -> None:
        from tpmtop.textsafe import safe
        from tpmtop.viewmodel.rows.handles import HandleOwner, HandleState

        row = self.screen.query_one(HandlesPanel).selected_row()
        if row is None or row.state is HandleState.GONE:
            self.screen.notify("select a handle the TPM still lists (keys 1, then the arrows)", severity="warning",
                               timeout=3)
            return
        self.host.jobs.inspect_handle(row.handle, row.kind, row.ours,
                            safe(row.created_by) if row.owner is HandleOwner.CLIENT else None)

    def action_flush_ours(self) -> None:
        self.host.jobs.flush_handles(None)

    def action_show_tcti(self) -> None:
        text, title, timeout, copy = self.host.dash.tcti_hint()
        if copy:
            self.screen.app.copy_to_clipboard(copy)
        self.screen.notify(text, title=title, timeout=timeout)

    def action_sort_table(self, step: int = 1) -> None:
        table = self.screen.focused if isinstance(self.screen.focused, KeyedTable) else None
        if table is None:
            self.screen.notify("focus a table first (1 Handles, 3 Latency)", severity="warning", timeout=3)
            return
        table.cycle_sort(step)  # the header marks the column (▼)

    def action_next_panel(self, step: int) -> None:
        """Tab / Shift-Tab: the next panel's tab in compact mode, the next widget otherwise."""
        if not self.host.compact:
            self.screen.focus_next() if step > 0 else self.screen.focus_previous()
            return
        i = self.host.panels.index(self.host.active_panel) if self.host.active_panel in self.host.panels else 0
        self.host.action_show_panel(self.host.panels[(i + step) % len(self.host.panels)])

    def action_refresh_rate(self, step: int) -> None:
        seconds = self.host.set_refresh(step)
        self.screen.notify(f"the screen refreshes every {seconds:g} s", title="refresh", timeout=2)

    def action_reset_stats(self) -> None:
        self.host.dash.reset()
        self.screen.query_one(StreamPanel).clear()
        self.host.refresh_all()
        self.screen.notify("statistics reset", timeout=2)

    def action_export(self) -> None:
        # The name is chosen here (a few stat calls) so the full path shows at once; the
        # capture itself takes seconds with many events and is written by a worker.
        try:
            target = self.host.dash.commands.export_target(self.host.jobs.export_dir)
        except OSError as e:
            where = e.filename or self.host.jobs.export_dir or "the data directory"
            self.screen.notify(f"cannot write captures in {where}: {e.strerror or e}", title="export failed",
                        severity="error", timeout=8)
            return
        self.screen.notify(f"writing {target}", title="export", timeout=10)
        self.host.jobs.export_capture(target)

    def decode_requested(self, event: StreamView.DecodeRequested) -> None:
        from tpmtop.tui.screens.decode import DecodeScreen

        self.screen.app.push_screen(DecodeScreen(self.host.dash.commands, event.row))

    def _frozen_stream(self) -> StreamView:
        """The frozen stream's view, shown; else the key is the focused widget's (SkipAction),
        and an input's keys are its own."""
        from textual.actions import SkipAction
        from textual.widgets import Input

        panel = self.screen.query_one(StreamPanel)
        if not panel.frozen or not panel.display or isinstance(self.screen.focused, Input):
            raise SkipAction()
        return panel.view

    def action_stream_scroll(self, n: int) -> None:
        self._frozen_stream().action_scroll_back(n)

    def action_stream_page(self, direction: int) -> None:
        self._frozen_stream().action_page(direction)

    def action_toggle_stream(self) -> None:
        if self.host.compact and self.host.active_panel != "stream" and "stream" in self.host.panels:
            # one panel at a time (80×24): freeze the stream where it can be seen, as `/` does,
            # not behind the panel on show (it froze out of sight and stayed so)
            self.host.action_show_panel("stream")
        panel = self.screen.query_one(StreamPanel)
        frozen = panel.toggle(self.host.dash.stream_snapshot() if not panel.frozen else None)
        self.screen.notify("stream frozen (recording goes on)" if frozen else "stream follows", timeout=2)

    def action_filter_stream(self) -> None:
        """``/``: a filter line in the focused table's panel (Handles, Latency), else the stream's."""
        from tpmtop.tui.screens.filter import PanelFilter

        if self.screen.query(PanelFilter):
            return  # one open at a time: the open one has the keys
        table = self.screen.focused if isinstance(self.screen.focused, KeyedTable) else None
        if table is not None:
            from textual.widget import Widget

            panel = next((a for a in table.ancestors if isinstance(a, Widget) and a.has_class("panel")), None)
            if panel is None:
                return

            def done(needle: str | None) -> None:
                if needle is not None:
                    table.set_filter(needle)  # the panel's subtitle names it at its next refresh
                    self.host.refresh_all()

            panel.mount(PanelFilter(panel.id or "", table.needle, done, "table-filter"), before=0)
            return
        if self.host.compact and self.host.active_panel != "stream":
            self.host.action_show_panel("stream")
        stream = self.screen.query_one(StreamPanel)

        def stream_done(needle: str | None) -> None:
            if needle is not None:
                stream.set_filter(needle)

        stream.mount(PanelFilter("stream", stream.needle, stream_done, "stream-filter"), before=0)

    def action_next_theme(self) -> None:
        from tpmtop.tui.themes import CyclesThemes

        if isinstance(self.screen.app, CyclesThemes):
            self.screen.app.cycle_theme()

    def action_show_boot(self) -> None:
        # Installed once: the report is built the first time only ('r' on that screen rebuilds).
        if not self.screen.app.is_screen_installed("boot"):
            from tpmtop.tui.screens.boot import BootScreen

            self.screen.app.install_screen(BootScreen(getattr(self.screen.app, "boot_root", "/")), "boot")
        self.screen.app.push_screen("boot")

    def action_show_projection(self) -> None:
        from tpmtop.tui.screens.projection import MISSING_LIVE, ProjectionScreen

        def done(new_n: int | None) -> None:
            if new_n is not None:
                self.host.dash.set_boot_n(new_n)

        self.screen.app.push_screen(ProjectionScreen(*self.host.dash.projection(MISSING_LIVE)), done)

    def action_help(self) -> None:
        from tpmtop.tui.screens.help import HelpScreen

        # Keys this source can never act on (False, not "not now") are named, not listed as keys.
        cmds = self.host.dash.commands
        never = frozenset(a.action for a in ACTIONS
                          if allowed(a.action.split("(")[0], self.host.caps, cmds, self) is False)
        # Built once per content and width, then kept installed: composing the help (markup,
        # wrapping, a new screen's styles) took 0.2-0.5 s of each ? under load.
        args = (never, self.host.caps.why_not if never else "", tuple(self.host.panels))
        name = f"help-{self.screen.app.size.width}-{abs(hash(args)):x}"
        if not self.screen.app.is_screen_installed(name):
            self.screen.app.install_screen(HelpScreen(*args), name)
        self.screen.app.push_screen(name)

    def action_show_messages(self) -> None:
        from tpmtop.tui.widgets.messages import open_log

        open_log(self.screen.app)

    def action_quit(self) -> None:
        self.screen.app.exit()
