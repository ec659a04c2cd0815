"""The frames a Textual app sends to its terminal, seen through Textual's public driver API.

``run_test()`` is headless by default, and a headless app renders no frame at all: it updates
its screen model and writes nothing. ``run_test(headless=False)`` runs the app's own
``driver_class`` (a public attribute and constructor argument of ``App``) instead, and Textual
then renders each screen update to terminal sequences and hands them to the driver's ``write``,
ending each with ``flush``: what a terminal would receive, at the moment it would. This driver
keeps them instead of sending them, so a test can ask what the user had been shown by then.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual import events
from textual.driver import Driver
from textual.geometry import Size

DEFAULT_SIZE = (80, 24)


class FrameTap:
    """``app.driver_class = tap.driver`` before ``app.run_test(headless=False, size=…)``:
    ``on_frame(data)`` is then called on the app's thread with each frame as it leaves for
    the terminal (its escape sequences and text), after Textual rendered it."""

    def __init__(self) -> None:
        self.on_frame: Callable[[str], None] = lambda data: None
        self.frames = 0
        tap = self

        class TapDriver(Driver):
            def __init__(self, app: Any, *, debug: bool = False, mouse: bool = True,
                         size: tuple[int, int] | None = None) -> None:
                super().__init__(app, debug=debug, mouse=mouse, size=size)
                self.terminal_size = Size(*(size or DEFAULT_SIZE))
                self.pending: list[str] = []

            def write(self, data: str) -> None:
                self.pending.append(data)

            def flush(self) -> None:  # the end of a frame (App writes one, then flushes)
                data, self.pending = "".join(self.pending), []
                if data:
                    tap.frames += 1
                    tap.on_frame(data)

            def start_application_mode(self) -> None:
                # what a terminal driver does first: tell the app its size
                self.send_message(events.Resize(self.terminal_size, self.terminal_size))

            def disable_input(self) -> None:
                pass  # no terminal to read keys from: a test's Pilot posts them

            def stop_application_mode(self) -> None:
                pass

        self.driver: type[Driver] = TapDriver
