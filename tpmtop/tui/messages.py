"""Past-tense messages that thread workers post; the main screen's handlers own the state."""

from __future__ import annotations

from pathlib import Path

from textual.message import Message

from tpmtop.viewmodel.commands import PollResult, SysfsSnapshot
from tpmtop.viewmodel.frame import StatsView


class PollDone(Message):
    def __init__(self, result: PollResult) -> None:
        super().__init__()
        self.result = result


class PollFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class Disconnected(Message):
    def __init__(self, error: str, from_poll: bool = False) -> None:
        super().__init__()
        self.error = error
        self.from_poll = from_poll  # the poll chain's outcome (its next poll is armed on it)


class Reconnected(Message):
    pass


class StatsReady(Message):
    """The tables' percentiles, computed off the UI thread (a tpmtop.viewmodel.frame.StatsView)."""

    def __init__(self, view: StatsView, generation: int) -> None:
        super().__init__()
        self.view = view
        self.generation = generation  # the view-model's when the computation started


class SysfsRead(Message):
    def __init__(self, snapshot: SysfsSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SysfsRead)  # a newer reading makes a queued one moot


class HandlesFlushed(Message):
    def __init__(self, handles: list[int], only_ours: bool = False) -> None:
        super().__init__()
        self.handles = handles
        self.only_ours = only_ours  # F: tpmtop's own; the notice says how many others it left


class ActionFailed(Message):
    def __init__(self, what: str, error: str) -> None:
        super().__init__()
        self.what = what
        self.error = error


class CaptureExported(Message):
    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path


class HandleInspected(Message):
    def __init__(self, title: str, rows: list[tuple[str, str]]) -> None:
        super().__init__()
        self.title = title
        self.rows = rows
