"""The main screen's refresh: an interval that asks the view-model for a frame, waits for a gap
in the workload's operations to draw it, and draws worker results with the next one.

A collaborator of :class:`~tpmtop.tui.screens.main.MainScreen` (not a mixin): it owns the
interval, the results waiting for the next tick and the refresh's hold of the workload.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from textual.screen import Screen
from textual.timer import Timer

from tpmtop.tui import messages as m
from tpmtop.tui.settled import after_frame
from tpmtop.tui.widgets.header import StatusHeader
from tpmtop.viewmodel.commands import UiHold
from tpmtop.viewmodel.dashboard import Dashboard
from tpmtop.viewmodel.frame import Frame

REFRESH_STEPS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)  # [ and ] move along these (htop's delay, live)
# A refresh due while the workload's operation is under way looks again this often for its end,
# and draws anyway after the longest (a slow chip's operation takes 150 ms: tpmtop.profiles).
QUIET_POLL_S = 0.002
QUIET_WAIT_MAX_S = 0.05


class RefreshClock:
    def __init__(self, screen: Screen[Any], dash: Dashboard, draw_tick: Callable[[], None],
                 show: Callable[[Frame], None], refresh_s: float) -> None:
        """``screen``: where the interval runs and the frame is drawn; ``draw_tick``: the screen's
        own refresh (a frame of the view-model); ``show``: hands a frame's parts to the panels;
        ``refresh_s``: the interval to start with."""
        self.screen = screen
        self.dash = dash
        self._draw_tick = draw_tick
        self._show = show
        self.refresh_s = refresh_s
        self.timer: Timer | None = None
        self.armed_s: float | None = None  # the interval the running timer was armed with
        self._skipped = False  # the last tick gave way to a key (tick)
        self._quiet_since: float | None = None  # a refresh waits for the workload's gap since then
        self._waiting: list[m.PollDone | m.StatsReady] = []  # worker results, drawn by the next tick

    def start(self) -> None:
        self.timer = self.screen.set_interval(self.refresh_s, self.tick)
        self.armed_s = self.refresh_s

    @property
    def waiting(self) -> bool:
        """A refresh waits for the end of the workload's operation (it draws then)."""
        return self._quiet_since is not None

    def step(self, step: int) -> float:
        """[ / ]: the screen's refresh interval, one step longer (1) or shorter (-1)."""
        i = min(range(len(REFRESH_STEPS)), key=lambda k: abs(REFRESH_STEPS[k] - self.refresh_s))
        self.refresh_s = REFRESH_STEPS[max(0, min(len(REFRESH_STEPS) - 1, i + step))]
        if self.timer is not None:
            self.timer.stop()
            self.start()
        return self.refresh_s

    def tick(self) -> None:
        """The interval's refresh. With a workload running it waits for the end of the operation
        under way, then draws while the workload waits (tpmtop.sources.gate): an operation
        that ran meanwhile waited for the GIL after each round trip, and the refresh's
        milliseconds showed in the Latency panel as the TPM's own tail (op p99 5.4-9.0 ms
        against 1.1-2.3 ms without the dashboard; benchmarks/refresh_tail.py)."""
        screen = self.screen
        if screen.app.screen is not screen or self._quiet_since is not None:
            return  # a modal is up (nothing visible to refresh), or this refresh already waits
        in_flight = getattr(screen.app, "key_in_flight", None)
        if not self._skipped and in_flight is not None and in_flight():
            # A key's screen is being drawn: this refresh waits for the next tick rather than
            # add to it. Once: keys held down repeat.
            self._skipped = True
            return
        self._skipped = False
        cmds = self.dash.commands
        if cmds.gated:
            cmds.hold(UiHold.REFRESH)  # a burst under way stops after this operation
            if cmds.busy:
                self._quiet_since = time.monotonic()
                screen.set_timer(QUIET_POLL_S, self._tick_when_quiet)
                return
        self.draw()

    def _tick_when_quiet(self) -> None:
        screen = self.screen
        if self.dash.commands.busy and time.monotonic() - (self._quiet_since or 0.0) < QUIET_WAIT_MAX_S:
            screen.set_timer(QUIET_POLL_S, self._tick_when_quiet)
            return
        self._quiet_since = None
        if screen.app.screen is not screen:
            self._drawn()
            return
        self.draw()

    def _torn_down(self) -> bool:
        """The app is exiting: its widgets are being removed while a timer of this clock, or a
        worker's result, is still due (seen under load: a tick drew into a screen with no header)."""
        screen = self.screen
        return not screen.is_attached or not screen.query(StatusHeader)

    def draw(self) -> None:
        screen = self.screen
        if self._torn_down():
            self._waiting = []
            self._drawn()
            return
        waiting, self._waiting = self._waiting, []
        for message in waiting:
            self._apply(message)
        self._draw_tick()
        if self.dash.commands.gated:
            # after the frame this refresh drew (queued behind what it queued itself)
            screen.call_next(screen.call_after_refresh, after_frame, screen, self._drawn)

    def _drawn(self) -> None:
        self.dash.commands.release(UiHold.REFRESH)

    # Where there are ticks, a worker's result waits for the next one (a refresh interval at
    # most): drawn at once, it was a frame of its own in the middle of the workload's
    # operations, or landed in a key's frame (updating its tables is ~2 ms of the UI thread
    # under two busy loops).
    def apply_or_wait(self, message: m.PollDone | m.StatsReady) -> None:
        if self.timer is not None and self.screen.app.screen is self.screen:
            self._waiting.append(message)
        else:
            self._apply(message)

    def _apply(self, message: m.PollDone | m.StatsReady) -> None:
        dash = self.dash
        if self._torn_down():
            return
        if isinstance(message, m.PollDone):
            self._show(dash.on_poll(message.result))
        elif message.generation == dash.generation:  # else a key changed the run meanwhile
            self._show(Frame(dash.header(), stats=message.view))
        else:
            dash.changed()
