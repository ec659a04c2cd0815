"""The Unlock panel's part: each LUKS2 token sealed to PCRs (tpmtop unlock) judged against the
source's latest PCR reading, the one the PCRs panel makes (every 10 s, PCR_Read, no
authorization). The headers are read again at most every :data:`HEADERS_EVERY_S` (they change
when someone enrolls a token); the verdicts are worked out again when a PCR value changed."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from tpmtop.sources.protocol import Source
from tpmtop.unlock.judge import Verdict
from tpmtop.unlock.report import DeviceReport, discover, judge_all, load

HEADERS_EVERY_S = 30.0


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


class _Cache:
    """Per device list: the headers read, and the rows of the last PCR values judged."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.read_at = -HEADERS_EVERY_S
        self.reports: list[DeviceReport] = []
        self.judged: tuple[object, tuple[UnlockRow, ...]] | None = None


_CACHES: dict[tuple[str, ...] | None, _Cache] = {}


def _rows(reports: list[DeviceReport]) -> tuple[UnlockRow, ...]:
    from tpmtop.unlock.judge import pcr_words

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
    values = source.pcr_values()
    devices = source.unlock_devices
    key = tuple(devices) if devices is not None else None
    cache = _CACHES.setdefault(key, _Cache())
    with cache.lock:
        now = time.monotonic()
        if now - cache.read_at >= HEADERS_EVERY_S:
            cache.reports = [load(p) for p in (devices if devices is not None else discover())]
            cache.read_at, cache.judged = now, None
        if not cache.reports:
            return UnlockPart("no LUKS2 device found (/etc/crypttab, block devices with a LUKS2 header)", ())
        if values is None:
            return UnlockPart("reading the PCRs…", ())
        stamp = tuple(sorted((b, tuple(sorted(v.items()))) for b, v in values.values.items()))
        if cache.judged is None or cache.judged[0] != stamp:
            judge_all(cache.reports, values.values, None)
            cache.judged = (stamp, _rows(cache.reports))
        rows = cache.judged[1]
    n = sum(1 for r in rows if r.verdict in (Verdict.WOULD_UNSEAL, Verdict.WOULD_NOT, Verdict.CANNOT_JUDGE))
    return UnlockPart(f"{n} TPM token{'s' if n != 1 else ''} on {len(cache.reports)} device"
                      f"{'s' if len(cache.reports) != 1 else ''}, against the PCRs read at pcrUpdateCounter "
                      f"{values.update_counter}", rows)
