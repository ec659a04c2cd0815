"""What the main screen's key actions (:class:`tpmtop.tui.screens.main_actions.KeyActions`) use
of the screen beyond Textual's own :class:`~textual.screen.Screen`: a protocol, so the actions
name no screen class and the screen's module and theirs import each other in one direction only."""

from __future__ import annotations

from typing import Protocol

from tpmtop.tui.screens.workers import TpmWorkers
from tpmtop.viewmodel.commands import Capabilities
from tpmtop.viewmodel.dashboard import Dashboard
from tpmtop.viewmodel.frame import Frame


class MainHost(Protocol):
    dash: Dashboard
    jobs: TpmWorkers
    panels: list[str]
    active_panel: str
    compact: bool

    @property
    def caps(self) -> Capabilities: ...

    def show(self, frame: Frame) -> None: ...
    def refresh_all(self) -> None: ...
    def set_refresh(self, step: int) -> float: ...
    def action_show_panel(self, pid: str) -> None: ...
