"""When the screen shows what was asked of it: a key's effect, a refresh's new values.

Textual draws in steps that each widget takes on its own message queue: a widget told to change
repaints when it next idles, and only then tells the screen, which draws at its next update.
A callback queued with ``call_after_refresh`` right after the change can run before all that,
when the screen looks idle because no widget has told it yet. So whoever waits for the frame
(the workload's holds: tpmtop.sources.live_workload) checks :func:`screen_settled` after each
frame, and while it is false looks again after the next one (:func:`look_again_after_frame`),
at most SETTLE_ROUNDS times.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from textual.message_pump import MessagePump
from textual.screen import Screen

SETTLE_ROUNDS = 8
SETTLE_POLL_S = 0.002


def screen_settled(screen: Screen) -> bool:
    """Every widget on ``screen`` is mounted and has no message waiting, and the screen has
    nothing left to lay out or paint."""
    if screen._dirty_widgets or screen._layout_required or screen._repaint_required:
        return False
    return all(w._is_mounted and w._message_queue.empty() for w in screen.walk_children(with_self=True))


def look_again_after_frame(pump: MessagePump, callback: Callable[..., Any], *args: Any) -> None:
    """``callback(*args)`` after a frame the widgets have had their turn in. A timer first:
    a ``call_after_refresh`` straight away ran before widgets with a repaint queued, as the
    screen's task took it and the next one without yielding to them (a refresh's eight rounds
    passed within 1 ms, and three of a `/` press's)."""
    pump.set_timer(SETTLE_POLL_S, partial(pump.call_after_refresh, callback, *args))
