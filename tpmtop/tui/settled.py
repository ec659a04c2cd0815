"""When the screen shows what was asked of it: a key's effect, a refresh's new values.

Textual draws in steps that each widget takes on its own message queue: a widget told to change
repaints when it next idles, and only then tells the screen, which draws at its next update.
A callback queued with ``call_after_refresh`` right after the change can run before all that,
when the screen looks idle because no widget has told it yet. So whoever waits for the frame
(the workload's holds: tpmtop.sources.live_workload) checks this after each frame, and waits
for another while it is false, at most SETTLE_ROUNDS frames.
"""

from __future__ import annotations

from textual.screen import Screen

SETTLE_ROUNDS = 8


def screen_settled(screen: Screen) -> bool:
    """Every widget on ``screen`` is mounted and has no message waiting, and the screen has
    nothing left to lay out or paint."""
    if screen._dirty_widgets or screen._layout_required or screen._repaint_required:
        return False
    return all(w._is_mounted and w._message_queue.empty() for w in screen.walk_children(with_self=True))
