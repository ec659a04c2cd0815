"""The Textual application: themes, the command palette, and one screen. Small on purpose;
the dashboard lives in ``screens/main.py`` and its panels in ``widgets/``."""

from __future__ import annotations

import gc
import sys
import time
from functools import partial

from textual import events, work
from textual.app import App, SystemCommand
from textual.filter import Monochrome, NoColor
from textual.notifications import Notify
from textual.worker import get_current_worker

from tpmtop import gcpause
from tpmtop.tui.actions import palette_entries
from tpmtop.tui.screens.main import MainScreen
from tpmtop.tui.settled import SETTLE_ROUNDS, look_again_after_frame, screen_settled
from tpmtop.tui.stylesheet import ThemeStylesheet
from tpmtop.tui.themes import DEFAULT_THEME, VARIABLE_DEFAULTS, load_themes, remember_theme, remembered_theme
from tpmtop.tui.widgets.messages import LoggedMessage, MessageLine, MessageLog

KEY_GC_DEFER_MAX_S = 1.0  # the longest a key keeps the cyclic collector off (TpmtopApp.on_event)
# A theme's rehearsal (~8 ms of the UI thread, twice that under load) waits until no key has
# come for this long: four back to back had landed in a key's time to screen (x: 32 ms of CPU).
KEYS_AT_REST_S = 1.0


class TpmtopApp(App):
    CSS_PATH = "tpmtop.tcss"
    TITLE = "tpmtop"

    def __init__(self, source, *, theme: str | None = None, remember: bool = True, export_dir: str | None = None,
                 themes=None, boot_root: str = "/", notices: list[str] | None = None) -> None:
        super().__init__()
        if self.no_color:
            # no-color.org: no colour at all. Textual's NO_COLOR filter turns colours into greys
            # (256-colour greys on the wire); NoColor drops them and keeps bold, reverse and dim.
            self._filters = [f for f in self._filters if not isinstance(f, Monochrome)] + [NoColor()]
        # Keeps each theme's parsed rules (tpmtop.tui.stylesheet): nothing is added to it yet.
        self.stylesheet = ThemeStylesheet(variables=self.get_css_variables())
        self.startup_notices = list(notices or [])  # said once the screen is up (what tpmtop cannot show here)
        self.source = source
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

    # -- messages: a line of their own (tpmtop.tui.widgets.messages), never a toast over data ---
    def _on_notify(self, event: Notify) -> None:
        n = event.notification
        self.message_log.add(LoggedMessage(n.message, n.title, n.severity, n.markup, n.raised_at, n.identity))
        super()._on_notify(event)  # Textual keeps it until its time-out, then it is dimmed here

    def _refresh_notifications(self) -> None:
        """Replaces Textual's (which shows toasts): the message lines of every screen show the
        latest message, bright until its time-out, then dim (a timer wakes them then)."""
        self._notifications._reap()
        live = {n.identity: n for n in self._notifications}
        latest = self.message_log.latest
        fresh = latest is not None and latest.identity in live
        for screen in self.screen_stack:
            for line in screen.query(MessageLine):
                line.show(latest, fresh, len(self.message_log.items))
        if fresh and latest is not None:
            self.set_timer(max(0.05, live[latest.identity].time_left), self._refresh_notifications)

    _held_for: events.Key | None = None  # the key being handled
    _gc_off_for: events.Key | None = None  # the key holding the cyclic collector's pause
    _key_at = 0.0  # when the last key came (time.monotonic)
    _key_drawing = False  # a key came and its screen is not drawn yet

    def key_in_flight(self) -> bool:
        """A key came and its screen is not drawn yet (for at most KEY_GC_DEFER_MAX_S)."""
        return self._key_drawing and time.monotonic() - self._key_at < KEY_GC_DEFER_MAX_S

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
        self._key_drawing = True
        # The workload's thread waits while the key is handled and its screen drawn (sources'
        # hold_for_ui says why).
        self.source.hold_for_ui()
        # No cyclic collection starts before the key's screen is drawn: a restyle and repaint
        # allocate enough to trigger 15-45 young collections (4-5 ms of a `t`) and, in a quarter
        # of `t` presses, a full one (+14-19 ms; benchmarks/ui_load.py). They run after the frame
        # instead. Reference counting frees as usual meanwhile; a watchdog turns the collector
        # back on if no frame follows.
        if self._gc_off_for is None:
            gcpause.pause()
        self._gc_off_for = event  # the newest key owns the one pause the keys hold
        self.set_timer(KEY_GC_DEFER_MAX_S, partial(self._gc_back_on, event))
        try:
            await super().on_event(event)
        finally:
            if not event.is_forwarded:  # a priority binding: its action ran in this call
                self._release_after_frame(event)
            else:  # after the focused widget has had it: if it kept the key, nothing comes back
                (self.focused or self.screen).call_later(self._release_if_kept, event)

    def _release_if_kept(self, event: events.Key) -> None:
        if event._stop_propagation:
            self._release_after_frame(event)

    def _release_after_frame(self, event: events.Key) -> None:
        """Release the workload and the collector after the screen update that draws the key's
        effect: queued behind what the action queued itself (a theme's restyle is a call_next),
        then after the refresh that follows. Released earlier (the first idle moment after the
        key arrived, which was before `t`'s restyle), a key paid for both."""
        self.call_next(self.call_after_refresh, self._key_drawn, event)

    def _key_drawn(self, event: events.Key, rounds: int = 0) -> None:
        if event is not self._held_for:
            return  # a newer key holds
        if rounds < SETTLE_ROUNDS and not screen_settled(self.screen):
            # What the action started is still going (a mounted filter line composing its
            # input, then focusing it): the screen drawn so far does not show the key's effect.
            look_again_after_frame(self, self._key_drawn, event, rounds + 1)
            return
        self._key_drawing = False
        self.source.release_for_ui()
        self._gc_back_on(event)

    def on_unmount(self) -> None:
        # The app ends (q, a test's run_test) between a key and its frame: the pause ends too.
        if self._gc_off_for is not None:
            self._gc_back_on(self._gc_off_for)

    def _gc_back_on(self, event: events.Key) -> None:
        if self._gc_off_for is event:
            self._gc_off_for = None
            gcpause.resume()

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(VARIABLE_DEFAULTS)

    def on_mount(self) -> None:
        if self.source.caps.workload:
            # The workload thread is Python between TPM round trips; with the default 5 ms
            # GIL switch interval a key waits behind it for whole intervals, many times over.
            # 1 ms cut the worst key-to-screen time under an unpaced workload (ui_load.py).
            sys.setswitchinterval(0.001)
        self.push_screen(MainScreen(self.source, self.export_dir))
        # Once the screen exists, move everything alive (Textual, its widgets, the modules: ~100k
        # objects) out of the cyclic GC's sight. Otherwise each full collection walks them all
        # and stops every thread for 50-70 ms — a key pressed then waits that long. Measured with
        # benchmarks/ui_load.py's workload: worst gen-2 pause 52 -> 3 ms at 100 ops/s, 72 -> 16 ms
        # unpaced, as long as the recorder's ring was young; once full, its 100,000 events made
        # it 44 ms median until they were kept out of the GC too (tpmtop.recorder.Event).
        # Frozen objects are still freed by reference counting.
        self.call_after_refresh(gc.freeze)
        for n in self.startup_notices:
            self.notify(n, title="tpmtop", severity="warning", timeout=12)
        for n in self.theme_notices:
            self.notify(n, title="theme", severity="warning", timeout=8)
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        self.set_timer(2.0, self._warm_themes)  # once the first screen's widgets have their styles

    def _theme_changed(self, theme) -> None:
        if self._remember:
            err = remember_theme(theme.name)
            if err:
                self.notify(err, severity="warning")
        # Not at once: the parse would compete for the GIL with this switch's own restyle.
        self.set_timer(3.0, self._warm_themes)

    def _css_variables_of(self, name: str) -> dict[str, str] | None:
        """What get_css_variables() gives once ``name`` is the theme (without switching to it)."""
        theme = self.get_theme(name)
        if theme is None:
            return None
        return {**self.get_theme_variable_defaults(), **theme.to_color_system().generate(), **theme.variables}

    @work(thread=True, exclusive=True, exit_on_error=False, group="styles", description="parse the other themes")
    def _warm_themes(self) -> None:
        """Parse the styles of every other theme, the one t switches to next first, and rehearse
        each (:meth:`_rehearse_theme`), so a switch only sets rules already worked out. All of
        them: t is often pressed a few times in a row, and each theme not parsed ahead cost its
        switch ~10 ms more of the UI thread (benchmarks/ui_load.py). A theme already parsed
        costs nothing here but the sources added since (a new screen's)."""
        worker = get_current_worker()
        names = self.tpmtop_themes
        i = names.index(self.theme) if self.theme in names else -1
        # This one last: rehearsed too, for t pressed round to it (its first styling keeps nothing).
        for name in names[i + 1:] + names[:max(i, 0)] + names[max(i, 0):i + 1]:
            variables = self._css_variables_of(name)
            if variables is not None and isinstance(self.stylesheet, ThemeStylesheet):
                self.stylesheet.warm(variables)
                while not worker.is_cancelled and (rest := KEYS_AT_REST_S - (time.monotonic() - self._key_at)) > 0:
                    time.sleep(rest)
                if worker.is_cancelled:
                    return
                self.call_from_thread(self._rehearse_theme, name, variables)

    def _rehearse_theme(self, name: str, variables: dict[str, str]) -> None:
        """Work out what every node would be given under theme ``name``, just parsed (UI thread:
        it reads the tree; one theme per call, so a key waits for one at most). The tree is
        matched as the switch will leave it: the App's theme classes, and the theme that :dark
        and :light test, are swapped in without a watcher or a restyle, and back."""
        theme = self.get_theme(name)
        if theme is None or not isinstance(self.stylesheet, ThemeStylesheet):
            return
        state = self.__dict__
        saved = self._classes, state["_reactive_theme"]
        kept = {c for c in self._classes if not c.startswith("-theme-") and c not in ("-dark-mode", "-light-mode")}
        self._classes = kept | {f"-theme-{name}", "-dark-mode" if theme.dark else "-light-mode"}
        state["_reactive_theme"] = name
        try:
            nodes = {id(n): n for root in (self, *self.screen_stack) for n in root.walk_children(with_self=True)}
            self.stylesheet.rehearse(nodes.values(), variables)
        finally:
            self._classes, state["_reactive_theme"] = saved

    def cycle_theme(self) -> None:
        names = self.tpmtop_themes
        i = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(i + 1) % len(names)]
        self.notify(f"theme {self.theme}", timeout=2)

    def get_system_commands(self, screen):
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
