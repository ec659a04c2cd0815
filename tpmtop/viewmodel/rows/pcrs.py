"""The PCRs panel's part: each PCR the event log extends or that does not match, per bank,
and the bank-health verdicts (tpmtop.pcrs), from a source that can read PCRs."""

from __future__ import annotations

from dataclasses import dataclass

from tpmtop.sources.protocol import Source


@dataclass(frozen=True)
class PcrsPart:
    note: str  # what was replayed, or why nothing is shown yet
    counter: int | None  # pcrUpdateCounter of the reading
    banks: tuple[tuple[str, bool], ...]  # (bank, every PCR matches)
    rows: tuple[tuple[int, str, str, int, str], ...]  # (pcr, bank, status, events, reason)
    health: tuple[tuple[str, str, str], ...]  # (bank, verdict, detail)


def part(source: Source) -> PcrsPart:
    snap = source.pcr_report()
    if snap is None:
        return PcrsPart("reading the PCRs…", None, (), (), ())
    return PcrsPart(snap.log_note, snap.update_counter, snap.banks, snap.rows, snap.health)
