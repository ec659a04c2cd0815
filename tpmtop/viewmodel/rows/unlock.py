"""The Unlock panel's part: each LUKS2 token sealed to PCRs (tpmtop unlock) as the source
judged it against its latest PCR reading, the one the PCRs panel makes (every 10 s, PCR_Read, no
authorization). The source reads the headers and judges (tpmtop.sources.luks); this module only
makes rows of what it hands up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tpmtop.sources.protocol import Source
from tpmtop.unlock.judge import Verdict, pcr_words

if TYPE_CHECKING:
    from tpmtop.unlock.report import DeviceReport


@dataclass(frozen=True)
class UnlockRow:
    device: str
    token: str  # "token 0 (systemd-tpm2), PCR 16 (sha256)"
    verdict: Verdict
    text: str  # "would not: PCR 16 (sha256) differs"


@dataclass(frozen=True)
class UnlockPart:
    note: str  # what was judged, or why nothing is shown yet
    rows: tuple[UnlockRow, ...]


def _rows(reports: tuple[DeviceReport, ...]) -> tuple[UnlockRow, ...]:
    out: list[UnlockRow] = []
    for r in reports:
        if r.error is not None:
            out.append(UnlockRow(r.path, "", Verdict.UNREADABLE, r.error))
        for j in r.judgements:
            t = j.token
            bound = f", {pcr_words(t.pcrs, t.bank)}" if t.pcrs and t.bank else ""
            out.append(UnlockRow(r.path, f"{t.label}{bound}", j.verdict, j.text))
    return tuple(out)


def part(source: Source) -> UnlockPart:
    if not source.caps.unlock:  # a capture or a kernel trace: no PCRs to judge against, no device read
        return UnlockPart("", ())
    reading = source.unlock_reading()
    if reading is None:
        return UnlockPart("reading the LUKS2 headers…", ())
    if not reading.devices:
        return UnlockPart("no LUKS2 device found (/etc/crypttab, block devices with a LUKS2 header)", ())
    if reading.update_counter is None:
        return UnlockPart("reading the PCRs…", ())
    rows = _rows(reading.devices)
    n = sum(1 for r in rows if r.verdict in (Verdict.WOULD_UNSEAL, Verdict.WOULD_NOT, Verdict.CANNOT_JUDGE))
    d = len(reading.devices)
    return UnlockPart(f"{n} TPM token{'s' if n != 1 else ''} on {d} device{'s' if d != 1 else ''}, "
                      f"against the PCRs read at pcrUpdateCounter {reading.update_counter}", rows)
