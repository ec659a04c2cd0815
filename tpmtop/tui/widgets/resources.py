"""Gauges: object slots, sessions, and the context-gap distance."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.widgets import Static

from tpmtop.tui.widgets.panel import Panel, QuietStatic
from tpmtop.viewmodel.rows.resources import Gauge, GaugeLevel

BAR = 20


class ResourcesPanel(Panel[list[Gauge]]):
    title = "Resources"
    can_focus = True  # nothing inside takes the focus: its key and Tab land on the panel itself

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._text = QuietStatic()  # every poll and tick re-sends mostly the same gauges

    def compose(self) -> ComposeResult:
        yield Static("waiting for the first poll…", id="gauges")

    def show_part(self, part: list[Gauge]) -> None:
        self.show(part)

    def show(self, gauges: list[Gauge]) -> None:
        lines = []
        width = max((len(g.label) for g in gauges), default=0)
        bar_w = max(5, min(BAR, (self.size.width or 40) - width - 22))
        for g in gauges:
            if g.note:  # nothing to draw a bar of: say why instead
                lines.append(f"{g.label.ljust(width)} [dim]{g.note}[/]")
                continue
            filled = min(bar_w, round(g.fraction * bar_w)) if g.total else 0
            bar = f"[$gauge-{g.level}]{'█' * filled}[/][dim]{'░' * (bar_w - filled)}[/]"
            warn = "  [b $gauge-full]FULL[/]" if g.level is GaugeLevel.FULL else ""
            peak = ""
            if g.peak is not None:
                peak = f" [$gauge-{g.peak_level}]peak {g.peak}[/]"
            lines.append(f"{g.label.ljust(width)} {bar} {g.used:>3}/{g.total:<5}{peak}{warn}")
        self._text.set(self.query_one("#gauges", Static), "\n".join(lines) or "no data")
