"""After the frame that shows what was asked of the screen: a key's effect, a refresh's values.

Textual draws in steps that each widget takes on its own message queue: a widget told to change
repaints when it next idles, and only then tells the screen, which draws at its next update.
A callback queued with ``call_after_refresh`` right after the change can run before all that.
So whoever waits for the frame (the workload's holds: tpmtop.sources.live_workload) waits for
one more: a short timer lets the widgets take their turn, then the refresh after it; a key waits
until the screen stops changing shape (:func:`when_settled`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from textual.app import App
from textual.message_pump import MessagePump
from textual.widget import Widget

SETTLE_POLL_S = 0.002


def after_frame(pump: MessagePump, callback: Callable[..., Any], *args: Any) -> None:
    """``callback(*args)`` after a frame the widgets have had their turn in. A timer first:
    a ``call_after_refresh`` straight away ran before widgets with a repaint queued, as the
    screen's task took it and the next one without yielding to them."""
    pump.set_timer(SETTLE_POLL_S, partial(pump.call_after_refresh, callback, *args))


SETTLE_ROUNDS = 8  # frames a key's release looks at, at most, for its screen to stop changing


def _shape(app: App[Any]) -> tuple[object, ...]:
    """What a key's action changes over several messages: the widgets mounted (a filter line,
    then its input) and the focus (given once the input is there)."""
    nodes = app.screen.walk_children(with_self=True)
    return (id(app.screen), id(app.focused),
            tuple((id(n), isinstance(n, Widget) and n.is_mounted, n.display) for n in nodes))


def when_settled(app: App[Any], callback: Callable[..., Any], *args: Any, rounds: int = SETTLE_ROUNDS,
                 last: tuple[object, ...] | None = None) -> None:
    """``callback(*args)`` after a frame drawn once the screen stopped changing shape: what a
    key mounted has composed and taken the focus (a `/` mounts a filter line whose input
    composes and takes the focus in messages of its own). Looked at after each frame, at most
    ``rounds`` times."""
    shape = _shape(app)
    if shape != last and rounds > 0:
        after_frame(app, partial(when_settled, app, callback, *args, rounds=rounds - 1, last=shape))
        return
    callback(*args)
