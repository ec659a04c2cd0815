"""The firmware's TCG event log (``binary_bios_measurements``) as ``tpmtop boot`` shows it: how
many events it holds and how many extend each PCR. Parsed by tpmtop's one event-log parser,
:mod:`tpmtop.pcrs.eventlog` (the format, the bounds and the errors are described there)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tpmtop.pcrs.eventlog import EV_NO_ACTION, EventLogError, parse

__all__ = ["EventLogError", "EventLogSummary", "parse_event_log"]


@dataclass
class EventLogSummary:
    format: str  # "crypto-agile" or "sha1"
    events: int = 0  # every record, including the header
    extends: int = 0  # records the firmware extended into a PCR (not EV_NO_ACTION)
    per_pcr: dict[int, int] = field(default_factory=dict)
    algorithms: list[str] = field(default_factory=list)
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"format": self.format, "events": self.events, "extends": self.extends,
                "per_pcr": {str(k): v for k, v in sorted(self.per_pcr.items())},
                "algorithms": self.algorithms, "note": self.note}


def parse_event_log(buf: bytes) -> EventLogSummary:
    """Count ``buf``'s records; a log with no readable first record is an :class:`EventLogError`.
    Where reading stopped (a bad record) or what was read past (padding) is the ``note``."""
    log = parse(buf)
    out = EventLogSummary(log.format, events=len(log.events), algorithms=list(log.banks))
    for ev in log.events:
        if ev.type != EV_NO_ACTION:
            out.extends += 1
            out.per_pcr[ev.pcr] = out.per_pcr.get(ev.pcr, 0) + 1
    if log.partial:
        out.note = f"unreadable after {len(log.events)} events (byte {log.stop_offset}): {log.stop_reason}"
    elif log.padding:
        out.note = f"{log.padding} zero bytes of padding after the last event"
    return out
