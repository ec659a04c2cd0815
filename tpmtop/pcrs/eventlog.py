"""The firmware's TCG event log, parsed within bounds and never aborted.

Formats (TCG PC Client Platform Firmware Profile §10): the first record is a SHA-1 style
TCG_PCR_EVENT; when its data is the ``Spec ID Event03`` structure the rest are crypto-agile
TCG_PCR_EVENT2 records carrying one digest per bank, with the sizes that header lists.
Without it the whole log is SHA-1 style (TPM 1.2 firmware). Integers little-endian.

Bad input is a fact about the log, not an error: the parser stops at the first record it
cannot read and says where (byte offset) and why; everything before is replayed. What is
read is bounded (:data:`MAX_LOG_BYTES`, :data:`MAX_EVENT_BYTES`, :data:`MAX_EVENTS`), so a
record claiming 4 GiB costs at most that much memory; a FIFO, a device (/dev/zero) or a file
past the size bound is refused by :mod:`tpmtop.boundedread` before a byte is parsed. A log with
no readable first record, or whose Spec ID header lists a bank twice, is refused
(:class:`EventLogError`, exit 2 with the offset).

This is tpmtop's one TCG event-log parser: ``tpmtop pcrs`` replays what it reads, and
``tpmtop boot`` (:mod:`tpmtop.boot.eventlog`) counts it.
"""

from __future__ import annotations

import os
import struct
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import overload

from tpmtop import boundedread
from tpmtop.errors import UsageError
from tpmtop.pcrs.events import EventType

EV_NO_ACTION = int(EventType.EV_NO_ACTION)
SPEC_ID_SIGNATURE = b"Spec ID Event03\0"
STARTUP_LOCALITY = b"StartupLocality\0"
# TPM_ALG_ID -> (hashlib name, digest size) for the banks a log may carry
ALGORITHMS = {0x0004: ("sha1", 20), 0x000B: ("sha256", 32), 0x000C: ("sha384", 48),
              0x000D: ("sha512", 64), 0x0012: ("sm3_256", 32)}
ALG_IDS = {name: alg for alg, (name, _) in ALGORITHMS.items()}

# Real firmware logs are tens of KiB (OVMF here: see tests/fixtures/pcrs/README); the kernel's
# own buffer is a few hundred KiB at most. 64 MiB holds any log a firmware writes and bounds a
# FIFO or /dev/zero.
MAX_LOG_BYTES = 64 << 20
MAX_EVENT_BYTES = 16 << 20  # one event's data (a db variable with many certificates is ~10 KiB)
MAX_EVENTS = 1_000_000
MAX_BANKS = 16  # a Spec ID header listing more is not a header


class EventLogError(UsageError):
    """A log with no readable first record: exit 2, with the offset."""


@dataclass(slots=True)
class Event:
    index: int  # 0-based record number, the Spec ID header included
    offset: int  # byte offset of the record in the log
    pcr: int
    type: int
    # the digests, concatenated in one bytes object, and where each bank's lies: (bank, start,
    # end), one tuple shared by every event that carries the header's banks in its order (a
    # dict of four bytes per event cost 50,000 events ~25 MB)
    layout: tuple[tuple[str, int, int], ...]
    raw: bytes
    data: bytes

    @property
    def digests(self) -> dict[str, bytes]:
        """bank -> digest"""
        return {b: self.raw[s:e] for b, s, e in self.layout}

    @property
    def banks(self) -> tuple[str, ...]:
        return tuple(b for b, _, _ in self.layout)


def layout_of(banks: list[str] | tuple[str, ...], sizes: list[int] | tuple[int, ...],
              gap: int = 0) -> tuple[tuple[str, int, int], ...]:
    """(bank, start, end) of each digest in a concatenation; ``gap``: bytes before each (a
    TCG_PCR_EVENT2's algorithm id)."""
    out, p = [], 0
    for b, n in zip(banks, sizes, strict=True):
        out.append((b, p + gap, p + gap + n))
        p += gap + n
    return tuple(out)


class Events(Sequence[Event]):
    """The log's events, kept as offsets into the log's bytes and made into :class:`Event`
    objects as they are read. 50,000 events held as objects (their digests and data copied
    out) cost ~22 MB; as offsets, ~1 MB: ``tpmtop pcrs --events`` streams a long log."""

    __slots__ = ("_buf", "_data", "_datalen", "_head", "_lay", "_layouts", "_off", "_raw", "_rawlen")

    def __init__(self, buf: bytes, head: Event) -> None:
        self._buf = buf
        self._head = head  # the first record (the Spec ID header, or a SHA-1 event)
        self._layouts: list[tuple[tuple[str, int, int], ...]] = []
        self._lay = array("H")  # each event's layout, an index into _layouts
        self._off, self._raw, self._rawlen = array("I"), array("I"), array("I")
        self._data, self._datalen = array("I"), array("I")

    def add(self, offset: int, raw: int, rawlen: int, data: int, datalen: int,
            layout: tuple[tuple[str, int, int], ...]) -> None:
        try:
            k = self._layouts.index(layout)
        except ValueError:
            k = len(self._layouts)
            self._layouts.append(layout)
        self._lay.append(k)
        self._off.append(offset)
        self._raw.append(raw)
        self._rawlen.append(rawlen)
        self._data.append(data)
        self._datalen.append(datalen)

    def __len__(self) -> int:
        return 1 + len(self._off)

    def _make(self, i: int) -> Event:
        j = i - 1
        buf, off, raw, data = self._buf, self._off[j], self._raw[j], self._data[j]
        pcr, etype = _HEAD.unpack_from(buf, off)
        return Event(i, off, pcr, etype, self._layouts[self._lay[j]], buf[raw:raw + self._rawlen[j]],
                     buf[data:data + self._datalen[j]])

    @overload
    def __getitem__(self, i: int) -> Event: ...

    @overload
    def __getitem__(self, i: slice) -> list[Event]: ...

    def __getitem__(self, i: int | slice) -> Event | list[Event]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("event index out of range")
        return self._head if i == 0 else self._make(i)

    def __iter__(self) -> Iterator[Event]:
        yield self._head
        for i in range(1, len(self)):
            yield self._make(i)


_HEAD = struct.Struct("<II")


@dataclass
class EventLog:
    format: str  # "crypto-agile" or "sha1"
    banks: list[str] = field(default_factory=list)
    events: Sequence[Event] = field(default_factory=list)
    startup_locality: int | None = None
    stop_offset: int | None = None  # where reading stopped, when it did not reach the end
    stop_reason: str | None = None
    notes: list[str] = field(default_factory=list)  # quirks read past
    padding: int = 0  # zero bytes after the last event (a fixed-size buffer the firmware did not fill)
    size: int = 0

    @property
    def partial(self) -> bool:
        return self.stop_reason is not None


def read_file(path: str, limit: int = MAX_LOG_BYTES) -> bytes:
    """At most ``limit`` bytes of the regular file ``path`` (:mod:`tpmtop.boundedread`: a FIFO
    with no writer, a device or a directory is refused, never waited on or read forever); a
    missing, unreadable or oversized file is an EventLogError naming it."""
    try:
        fd = boundedread.open_bounded(path, what="event log")
        try:
            size = os.fstat(fd).st_size
            if 0 < size <= limit:
                # one read into one object: the chunked read held the log twice at its peak
                # (its chunks and their join), 12 MB more for a 50,000-event log
                buf = os.read(fd, size)
                if len(buf) == size and not os.read(fd, 1):
                    return buf
        finally:
            os.close(fd)
        # securityfs reports size 0, a file may grow: read in chunks, with the bound
        return boundedread.read_bounded(path, limit, what="event log")
    except UsageError as e:
        raise EventLogError(str(e)) from None
    except FileNotFoundError:
        raise EventLogError(f"{path}: no such file") from None
    except PermissionError:
        raise EventLogError(f"{path}: permission denied (the firmware log is readable by root only)") from None
    except OSError as e:
        raise EventLogError(f"{path}: cannot read: {e.strerror}") from None


class _Short(Exception):
    """A record runs past the bytes read (truncated log, or an absurd size)."""


PROGRESS_EVERY = 8192  # records between two progress callbacks
# progress(stage, done, total or None): what reading and replaying report every PROGRESS_EVERY records
Progress = Callable[[str, int, "int | None"], None]


def parse(buf: bytes, *, max_events: int = MAX_EVENTS, progress: Progress | None = None) -> EventLog:
    """Parse ``buf``; ``progress(stage, done, total)``: called every few thousand records."""
    mv = memoryview(buf)
    n = len(buf)
    if n < 32:
        raise EventLogError(f"offset 0: only {n} bytes, too short for a TCG event log")
    pcr, etype = struct.unpack_from("<II", buf, 0)
    size = struct.unpack_from("<I", buf, 28)[0]
    if size > n - 32:
        raise EventLogError(f"offset 28: the first event claims {size} bytes of data, the log has "
                            f"{n - 32} after it: not a TCG event log")
    if not any(mv[:32 + size]):
        raise EventLogError("offset 0: the log begins with zero bytes: not a TCG event log")
    data = bytes(mv[32:32 + size])
    if etype == EV_NO_ACTION and data.startswith(SPEC_ID_SIGNATURE):
        log = EventLog("crypto-agile")
        sizes = _spec_id(data, log)
    else:
        log = EventLog("sha1", banks=["sha1"])
        sizes = {}
    log.size = n
    sha1_layout = layout_of(("sha1",), (20,))
    header_layout = layout_of(log.banks, [n for _, n in sizes.values()], gap=2) if sizes else sha1_layout
    events = Events(buf, Event(0, 0, pcr, etype, () if sizes else sha1_layout, b"" if sizes else bytes(mv[8:28]),
                               data))
    log.events = events
    off = 32 + size
    unpack2 = struct.Struct("<II").unpack_from
    unpack_u32 = struct.Struct("<I").unpack_from
    unpack_u16 = struct.Struct("<H").unpack_from
    agile = log.format == "crypto-agile"
    short: list[str] = []  # the first event carrying fewer banks than the header
    short_n = 0
    while off < n:
        if len(events) >= max_events:
            log.stop_offset, log.stop_reason = off, f"stopped after {max_events} events (tpmtop's bound)"
            break
        start = off
        if progress is not None and not len(events) % PROGRESS_EVERY:
            progress("reading the event log", off, n)
        try:
            if off + 8 > n:
                raise _Short(f"{n - off} bytes left, less than an event header")
            pcr, etype = unpack2(buf, off)
            off += 8
            got: list[str] = []
            lens: list[int] = []
            dstart = 0
            if agile:
                if off + 4 > n:
                    raise _Short("digest count runs past the end")
                count = unpack_u32(buf, off)[0]
                off += 4
                dstart = off
                if count > MAX_BANKS:
                    raise ValueError(f"claims {count} digests (the header lists {len(sizes)} banks)")
                for _ in range(count):
                    if off + 2 > n:
                        raise _Short("digest runs past the end")
                    alg = unpack_u16(buf, off)[0]
                    off += 2
                    if alg not in sizes:
                        raise ValueError(f"digest algorithm 0x{alg:04x} is not in the Spec ID header")
                    name, dsize = sizes[alg]
                    if off + dsize > n:
                        raise _Short("digest runs past the end")
                    got.append(name)
                    lens.append(dsize)
                    off += dsize
            else:
                if off + 20 > n:
                    raise _Short("digest runs past the end")
                got.append("sha1")
                lens.append(20)
                dstart = off
                off += 20
            if off + 4 > n:
                raise _Short("event size runs past the end")
            size = unpack_u32(buf, off)[0]
            off += 4
            if size > MAX_EVENT_BYTES:
                raise ValueError(f"event data size {size} is past tpmtop's bound of {MAX_EVENT_BYTES} bytes")
            if off + size > n:
                raise _Short(f"event data ({size} bytes) runs past the end ({n - off} left)")
            dataoff = off
            off += size
        except _Short as e:
            if not any(mv[start:]):
                _padding(log, n - start, start)
                break
            log.stop_offset, log.stop_reason = start, f"truncated: {e}"
            break
        except ValueError as e:
            log.stop_offset, log.stop_reason = start, str(e)
            break
        # the digests as they lie in the record (each after its 2-byte algorithm id): one slice
        rawlen = sum(lens) + 2 * len(lens) if agile else 20
        # an all-zero record: the rest of a fixed-size buffer the firmware did not fill
        if pcr == 0 and etype == 0 and not size and not any(mv[start:]):
            _padding(log, n - start, start)
            break
        if etype == EV_NO_ACTION and size >= 17 and buf.startswith(STARTUP_LOCALITY, dataoff):
            log.startup_locality = buf[dataoff + 16]
        if not agile:
            lay = sha1_layout
        elif got == log.banks:
            lay = header_layout  # shared
        else:
            lay = layout_of(got, lens, gap=2)
        if lay is not header_layout and set(got) != set(log.banks):
            # counted, one note at the end: a crafted log can have a million such events
            if not short:
                short.append(f"event {len(events)} (byte {start}) carries "
                             f"{', '.join(got) or 'no digest'}")
            short_n += 1
        events.add(start, dstart, rawlen, dataoff, size, lay)
    if short_n:
        log.notes.append(f"{short_n} {'event carries' if short_n == 1 else 'events carry'} fewer banks than "
                         f"the header lists (first: {short[0]}); the PCRs they extend are not judged in "
                         f"the banks they lack")
    return log


def _padding(log: EventLog, size: int, offset: int) -> None:
    log.padding = size
    log.notes.append(f"{size} zero bytes of padding after the last event (byte {offset})")


def _spec_id(data: bytes, log: EventLog) -> dict[int, tuple[str, int]]:
    """TCG_EfiSpecIdEvent: signature[16], platformClass u32, versions u8×3, uintnSize u8,
    numberOfAlgorithms u32, {algorithmId u16, digestSize u16}…, vendorInfoSize u8, vendorInfo."""
    p = 16 + 8
    try:
        nalg = struct.unpack_from("<I", data, p)[0]
        p += 4
        if not 0 < nalg <= MAX_BANKS:
            raise EventLogError(f"offset 32: the Spec ID header lists {nalg} digest algorithms")
        sizes: dict[int, tuple[str, int]] = {}
        for _ in range(nalg):
            alg, dsize = struct.unpack_from("<HH", data, p)
            p += 4
            name = ALGORITHMS.get(alg, (f"alg_0x{alg:04x}", dsize))[0]
            if alg in sizes:
                raise EventLogError(f"offset 32: the Spec ID header lists {name} more than once")
            if alg in ALGORITHMS and ALGORITHMS[alg][1] != dsize:
                log.notes.append(f"the Spec ID header gives {name} a {dsize}-byte digest")
            sizes[alg] = (name, dsize)
            log.banks.append(name)
        if p < len(data) and data[p]:
            log.notes.append(f"the Spec ID header carries {data[p]} bytes of vendor information")
    except struct.error:
        raise EventLogError("offset 32: the Spec ID header is cut short") from None
    return sizes


def parse_file(path: str, progress: Progress | None = None) -> EventLog:
    buf = read_file(path)
    try:
        return parse(buf, progress=progress)
    except EventLogError as e:
        raise EventLogError(f"{path}: {e}") from None
