"""Failure patterns as dashboard alerts: a notification when a pattern appears, and again
each time its count doubles, with the count and the time lost (tpmtop.patterns does the
detecting; this only decides when to speak)."""

from __future__ import annotations

from tpmtop.patterns import Detector, fmt_ms


class PatternAlerts:
    def __init__(self) -> None:
        self.detector = Detector()
        self._told: dict[tuple, int] = {}  # pattern key -> count when last announced
        self.current: list = []

    def feed(self, screen, events) -> None:
        self.detector.add(events)
        self.current = self.detector.patterns()
        for p in self.current:
            key = (p.kind, p.command, p.rc)
            told = self._told.get(key, 0)
            if p.count >= max(1, 2 * told):
                self._told[key] = p.count
                hint = f"\n{p.hint}" if p.hint else ""
                screen.notify(f"{p.title}: {p.count} times, {fmt_ms(p.lost_ns)} lost{hint}",
                              title="failure pattern", severity="warning", timeout=10)
