"""The Textual application: themes, the command palette, and one screen. Small on purpose;
the dashboard lives in ``screens/main.py`` and its panels in ``widgets/``."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

from textual import events
from textual.app import App, SystemCommand
from textual.filter import LineFilter, Monochrome, NoColor
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.theme import Theme

from tpmtop import settings
from tpmtop.tui.actions import palette_entries
from tpmtop.tui.compat import check_hooks
from tpmtop.tui.screens.main import MainScreen
from tpmtop.tui.settled import when_settled
from tpmtop.tui.themes import (
    DEFAULT_THEME,
    VARIABLE_DEFAULTS,
    LoadedThemes,
    load_themes,
    remember_theme,
    remembered_theme,
)
from tpmtop.tui.widgets.messages import LoggedMessage, MessageLine, MessageLog
from tpmtop.viewmodel.commands import Commands, Source, UiHold

KEY_HOLD_MAX_S = 1.0  # past this a key no longer counts as in flight (a refresh stops giving way)


class TpmtopApp(App[None]):
    CSS_PATH = "tpmtop.tcss"
    TITLE = "tpmtop"

    def __init__(self, source: Source, *, theme: str | None = None, remember: bool = True,
                 export_dir: str | None = None, themes: LoadedThemes | None = None, boot_root: str = "/",
                 notices: list[str] | None = None,
                 refresh_s: float | None = None) -> None:
        """``refresh_s``: the screen's refresh interval to start with ([ and ] change it; None:
        the refresh_s setting, tpmtop.settings)."""
        super().__init__()
        self.refresh_s = settings.current().refresh_s if refresh_s is None else refresh_s
        self.startup_notices = list(notices or [])  # said once the screen is up (what tpmtop cannot show here)
        # A Textual hook tpmtop relies on that this Textual changed (tui/compat.py; none today).
        self.startup_notices += [f"this Textual changed what tpmtop uses: {why}" for why in check_hooks()]
        self.source = source  # handed to the main screen's view-model, which alone calls it
        self.commands = Commands(source)  # the gate a key holds
        self.boot_root = boot_root  # the Boot screen's --root; tests point it at a fixture tree
        self.export_dir = export_dir  # None: tpmtop's data directory
        self.exported: list[str] = []  # captures written by x, named again on exit
        loaded = themes or load_themes()
        self.theme_notices = list(loaded.notices)
        for t in loaded.themes:
            self.register_theme(t)
        self.tpmtop_themes = loaded.names
        wanted = theme or (remembered_theme() if remember else None) or DEFAULT_THEME
        if wanted not in self.available_themes:
            have = ", ".join(self.tpmtop_themes)
            self.theme_notices.append(f"no theme '{wanted}' (have: {have}); using {DEFAULT_THEME}")
            wanted = DEFAULT_THEME
        self.theme = wanted
        self._remember = remember
        self.message_log = MessageLog()

    _no_colour = NoColor()

    def get_line_filters(self) -> Sequence[LineFilter]:
        """no-color.org: no colour at all. Textual's NO_COLOR filter turns colours into greys
        (256-colour greys on the wire); NoColor drops them and keeps bold, reverse and dim."""
        filters = super().get_line_filters()
        if not self.no_color:
            return filters
        return [self._no_colour if isinstance(f, Monochrome) else f for f in filters]

    # -- messages: a line of their own (tpmtop.tui.widgets.messages), never a toast over data ---
    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """Instead of Textual's toast: the message goes to the log and the message line of
        every screen, bright for ``timeout`` seconds, dim after. Thread-safe, as App.notify is
        (the log is a deque; the lines are redrawn on the UI thread)."""
        timeout = self.NOTIFICATION_TIMEOUT if timeout is None else timeout
        self.message_log.add(LoggedMessage(message, title, severity, markup, time.time(),
                                           fresh_until=time.monotonic() + timeout))
        self.call_later(self.show_messages)

    def show_messages(self) -> None:
        """The message lines of every screen show the latest message, bright until its
        time-out, then dim (a timer wakes them then)."""
        latest = self.message_log.latest
        left = latest.fresh_until - time.monotonic() if latest is not None else 0.0
        for screen in self.screen_stack:
            for line in screen.query(MessageLine):
                line.show(latest, left > 0, len(self.message_log.items))
        if left > 0:
            self.set_timer(max(0.05, left), self.show_messages)

    # -- a key holds the workload until its screen is drawn (tpmtop.sources.gate) --------------
    _held_for: events.Key | None = None  # the key being handled
    _key_at = 0.0  # when the last key came (time.monotonic)

    def key_in_flight(self) -> bool:
        """A key came and its screen is not drawn yet (for at most KEY_HOLD_MAX_S)."""
        return self._held_for is not None and time.monotonic() - self._key_at < KEY_HOLD_MAX_S

    async def on_event(self, event: events.Event) -> None:
        if not isinstance(event, events.Key):
            await super().on_event(event)
            return
        if event is self._held_for:
            # A forwarded key bubbles back up to the app, and only here are the screen's and
            # the app's bindings checked: the key's action runs in this call.
            try:
                await super().on_event(event)
            finally:
                self._release_after_frame(event)
            return
        self._held_for = event
        self._key_at = time.monotonic()
        # The workload's thread waits while the key is handled and its screen drawn.
        self.commands.hold(UiHold.KEY)
        try:
            await super().on_event(event)
        finally:
            # A priority binding ran its action in this call; a forwarded key is the focused
            # widget's first, and comes back here only if the widget let it go: either way the
            # release is queued behind what the key queued.
            target = self if not event.is_forwarded else (self.focused or self.screen)
            target.call_later(self._release_after_frame, event)

    def _release_after_frame(self, event: events.Key) -> None:
        """Release the workload after the screen update that draws the key's effect: queued
        behind what the action queued itself (a theme's restyle is a call_next), then after
        the refresh that follows, then once the screen stops changing shape (what the action
        mounted composes and takes the focus in messages of its own)."""
        self.call_next(self.call_after_refresh, when_settled, self, self._key_drawn, event)

    def _key_drawn(self, event: events.Key) -> None:
        if event is not self._held_for:
            return  # a newer key holds, or this one was released already
        self._held_for = None
        self.commands.release(UiHold.KEY)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(VARIABLE_DEFAULTS)

    def on_mount(self) -> None:
        self.push_screen(MainScreen(self.source, self.export_dir, self.refresh_s))
        for n in self.startup_notices:
            self.notify(n, title="tpmtop", severity="warning", timeout=12)
        for n in self.theme_notices:
            self.notify(n, title="theme", severity="warning", timeout=8)
        self.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, theme: Theme) -> None:
        if self._remember:
            err = remember_theme(theme.name)
            if err:
                self.notify(err, severity="warning")

    def cycle_theme(self) -> None:
        names = self.tpmtop_themes
        i = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(i + 1) % len(names)]
        self.notify(f"theme {self.theme}", timeout=2)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        # Textual's own entries, minus its Quit (ours flushes and says so) and its Theme
        # chooser (20+ built-in themes beside tpmtop's four: "theme: Use …" below).
        for c in super().get_system_commands(screen):
            if c.title not in ("Quit", "Theme"):
                yield c
        if not isinstance(screen, MainScreen):
            return
        for title, help_text, action in palette_entries():
            name = action.split("(")[0]
            if screen.check_action(name, ()) is False:
                continue  # not available in this kind of sitting
            yield SystemCommand(title, help_text, partial(screen.run_action, action))
        for name in self.tpmtop_themes:
            yield SystemCommand(f"theme: Use {name}", f"switch to the {name} theme",
                                partial(setattr, self, "theme", name))
