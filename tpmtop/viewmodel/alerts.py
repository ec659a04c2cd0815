"""Failure patterns as dashboard alerts: a notice when a pattern appears, and again each time
its count doubles, with the count and the time lost (:mod:`tpmtop.patterns` does the
detecting; this only decides when to speak). No Textual here."""

from __future__ import annotations

from typing import Any

from tpmtop.patterns import Detector, Pattern, fmt_ms
from tpmtop.viewmodel.frame import Notice, Severity


class PatternAlerts:
    def __init__(self) -> None:
        self.detector = Detector()
        self._told: dict[tuple[Any, ...], int] = {}  # pattern key -> count when last announced
        self.current: list[Pattern] = []

    def feed(self, events: list[Any]) -> list[Notice]:
        self.detector.add(events)
        self.current = self.detector.patterns()
        out = []
        for p in self.current:
            key = (p.kind, p.command, p.rc)
            told = self._told.get(key, 0)
            if p.count >= max(1, 2 * told):
                self._told[key] = p.count
                hint = f"\n{p.hint}" if p.hint else ""
                out.append(Notice(f"{p.title}: {p.count} times, {fmt_ms(p.lost_ns)} lost{hint}", "failure pattern",
                                  Severity.WARNING, 10))
        return out
