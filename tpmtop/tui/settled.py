"""After the frame that shows what was asked of the screen: a key's effect, a refresh's values.

Textual draws in steps that each widget takes on its own message queue: a widget told to change
repaints when it next idles, and only then tells the screen, which draws at its next update.
A callback queued with ``call_after_refresh`` right after the change can run before all that.
So whoever waits for the frame (the workload's holds: tpmtop.sources.live_workload) waits for
one more: a short timer lets the widgets take their turn, then the refresh after it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from textual.message_pump import MessagePump

SETTLE_POLL_S = 0.002


def after_frame(pump: MessagePump, callback: Callable[..., Any], *args: Any) -> None:
    """``callback(*args)`` after a frame the widgets have had their turn in. A timer first:
    a ``call_after_refresh`` straight away ran before widgets with a repaint queued, as the
    screen's task took it and the next one without yielding to them."""
    pump.set_timer(SETTLE_POLL_S, partial(pump.call_after_refresh, callback, *args))
