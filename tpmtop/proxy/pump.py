"""The raw TPM's turns, pumped on the proxy's loop (a part of
:class:`~tpmtop.proxy.server.ProxyServer`): :class:`.turns.Turns` says what is due, this grants
and refuses it and sets a timer for when the next can be. Layer: proxy; no Textual."""

from __future__ import annotations

from typing import Any

from tpmtop.proxy.state import ServerState


class TurnPump:
    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._timer: Any = None
        self._pumping = self._again = False

    def queued(self, depth: int) -> None:
        """Turns' on_queue: the deepest queue is accounted."""
        if depth > self.state.accounts.queue_max:
            self.state.accounts.queue_max = depth

    def pump(self) -> None:
        """Grant and refuse the turns now due (:mod:`.turns`), then look again when the next
        can be. Re-entered from a grant (its command answered at once), it runs once more
        after the one in progress instead of inside it."""
        turns = self.state.turns
        if turns is None or (turns.quiet and not self._pumping):
            return  # nothing waits (every answer and departure asks: most find nothing)
        if self._pumping:
            self._again = True
            return
        self._pumping = True
        try:
            while True:
                self._again = False
                granted, refused, due = turns.pump()
                for waiter, waited in granted:
                    waiter.turn_granted(waited)
                for waiter, why in refused:
                    waiter.turn_refused(why)
                if not self._again:
                    break
        finally:
            self._pumping = False
        t = self._timer
        if due is not None and (t is None or t.cancelled or t.when > due):
            if t is not None:
                t.cancel()
            self._timer = self.state.loop.call_at(due, self._due)

    def _due(self) -> None:
        self._timer = None
        self.pump()
