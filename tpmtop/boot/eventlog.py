"""The firmware's TCG event log (``binary_bios_measurements``): how many events it holds.

Format (TCG PC Client Platform Firmware Profile, §10): the first record is a SHA-1 style
TCG_PCR_EVENT; when its data is the ``Spec ID Event03`` structure the rest are crypto-agile
TCG_PCR_EVENT2 records whose digest sizes come from that header. Without it the whole log is
SHA-1 style (TPM 1.2 firmware). All integers little-endian.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from tpmtop.errors import UsageError

EV_NO_ACTION = 0x3
SPEC_ID_SIGNATURE = b"Spec ID Event03\0"
ALG_NAMES = {0x0004: "sha1", 0x000B: "sha256", 0x000C: "sha384", 0x000D: "sha512", 0x0012: "sm3_256"}


class EventLogError(UsageError):
    """A firmware event log that does not parse: reported as a fact's reason, or exit 2."""


@dataclass
class EventLog:
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


def _take(buf: bytes, off: int, n: int) -> tuple[bytes, int]:
    if off + n > len(buf):
        raise EventLogError(f"record runs past the end ({off + n} > {len(buf)} bytes)")
    return buf[off:off + n], off + n


def _u32(buf: bytes, off: int) -> tuple[int, int]:
    b, off = _take(buf, off, 4)
    return struct.unpack("<I", b)[0], off


def _u16(buf: bytes, off: int) -> tuple[int, int]:
    b, off = _take(buf, off, 2)
    return struct.unpack("<H", b)[0], off


def _count(log: EventLog, pcr: int, etype: int) -> None:
    log.events += 1
    if etype != EV_NO_ACTION:
        log.extends += 1
        log.per_pcr[pcr] = log.per_pcr.get(pcr, 0) + 1


def parse_event_log(buf: bytes) -> EventLog:
    if len(buf) < 32:
        raise EventLogError(f"only {len(buf)} bytes: too short for a TCG event log")
    pcr, off = _u32(buf, 0)
    etype, off = _u32(buf, off)
    _, off = _take(buf, off, 20)
    size, off = _u32(buf, off)
    data, off = _take(buf, off, size)
    sizes: dict[int, int] = {}
    if etype == EV_NO_ACTION and data.startswith(SPEC_ID_SIGNATURE):
        log = EventLog("crypto-agile")
        p = len(SPEC_ID_SIGNATURE) + 8  # platformClass, version minor/major, errata, uintnSize
        nalg, p = _u32(data, p)
        for _ in range(nalg):
            alg, p = _u16(data, p)
            dsize, p = _u16(data, p)
            sizes[alg] = dsize
            log.algorithms.append(ALG_NAMES.get(alg, f"0x{alg:04x}"))
    else:
        log = EventLog("sha1", algorithms=["sha1"])
    _count(log, pcr, etype)
    while off < len(buf):
        if not any(buf[off:]):
            log.note = f"{len(buf) - off} zero bytes of padding after the last event"
            break
        start = off
        try:
            pcr, off = _u32(buf, off)
            etype, off = _u32(buf, off)
            if log.format == "crypto-agile":
                ndig, off = _u32(buf, off)
                for _ in range(ndig):
                    alg, off = _u16(buf, off)
                    if alg not in sizes:
                        raise EventLogError(f"digest algorithm 0x{alg:04x} not in the Spec ID header")
                    _, off = _take(buf, off, sizes[alg])
            else:
                _, off = _take(buf, off, 20)
            size, off = _u32(buf, off)
            _, off = _take(buf, off, size)
        except EventLogError as e:
            log.note = f"unreadable after {log.events} events (byte {start}): {e}"
            break
        _count(log, pcr, etype)
    return log
