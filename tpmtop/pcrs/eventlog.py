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

    __slots__ = ("_buf", "_data", "_datalen", "_head", "_lay", "_layouts", "_off", "_raw", "_rawlen", "_reader")

    def __init__(self, source: bytes | _FileReader, head: Event) -> None:
        # the log's bytes, or (a log read a window at a time) the file to read each record from
        self._buf = source if isinstance(source, bytes) else None
        self._reader = source if isinstance(source, _FileReader) else None
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
        off, raw, data = self._off[j], self._raw[j], self._data[j]
        buf = self._buf
        if buf is None:
            assert self._reader is not None
            end = data + self._datalen[j]
            buf = self._reader.read(off, end - off)  # the record alone: offsets from its start
            raw, data, off0 = raw - off, data - off, 0
        else:
            off0 = off
        pcr, etype = _HEAD.unpack_from(buf, off0)
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


class _FileReader:
    """A log file read where asked (pread), for a log too large to hold: each event is read
    again when it is used. The descriptor is closed with the reader."""

    def __init__(self, fd: int, size: int, path: str) -> None:
        self._file = os.fdopen(fd, "rb", buffering=0)  # owns fd: closed when the reader goes
        self.size = size
        self.path = path

    def read(self, offset: int, n: int) -> bytes:
        b = os.pread(self._file.fileno(), n, offset)
        if len(b) != n:
            raise EventLogError(f"{self.path}: the log changed while tpmtop read it (byte {offset})")
        return b


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
    except (UsageError, OSError) as e:
        raise unreadable(path, e, "the firmware log") from None


def unreadable(path: str, e: UsageError | OSError, what: str) -> EventLogError:
    """One line for a log tpmtop could not read (the firmware log, IMA's list, systemd's
    measure log: each is root's alone on a live system). A bound's refusal already names the
    file (tpmtop.boundedread)."""
    if isinstance(e, UsageError):
        return EventLogError(str(e))
    if isinstance(e, FileNotFoundError):
        return EventLogError(f"{path}: no such file")
    if isinstance(e, PermissionError):
        return EventLogError(f"{path}: permission denied ({what} is readable by root only)")
    return EventLogError(f"{path}: cannot read: {e.strerror}")


class _Short(Exception):
    """A record runs past the bytes read (truncated log, or an absurd size)."""


PROGRESS_EVERY = 8192  # records between two progress callbacks
# progress(stage, done, total or None): what reading and replaying report every PROGRESS_EVERY records
Progress = Callable[[str, int, "int | None"], None]


class _Parse:
    """One parse in progress: what the header said, and the counts kept across the windows a
    file is read in (:func:`parse_file` reads a large log a window at a time)."""

    def __init__(self, head: bytes, total: int, events_source: bytes | _FileReader, max_events: int,
                 progress: Progress | None) -> None:
        n = len(head)
        mv = memoryview(head)
        if n < 32:
            raise EventLogError(f"offset 0: only {n} bytes, too short for a TCG event log")
        pcr, etype = struct.unpack_from("<II", head, 0)
        size = struct.unpack_from("<I", head, 28)[0]
        if size > total - 32:
            raise EventLogError(f"offset 28: the first event claims {size} bytes of data, the log has "
                                f"{total - 32} after it: not a TCG event log")
        if 32 + size > n:
            raise _Short("the first event runs past the window")
        if not any(mv[:32 + size]):
            raise EventLogError("offset 0: the log begins with zero bytes: not a TCG event log")
        data = bytes(mv[32:32 + size])
        if etype == EV_NO_ACTION and data.startswith(SPEC_ID_SIGNATURE):
            self.log = EventLog("crypto-agile")
            self.sizes = _spec_id(data, self.log)
        else:
            self.log = EventLog("sha1", banks=["sha1"])
            self.sizes = {}
        self.log.size = total
        self.sha1_layout = layout_of(("sha1",), (20,))
        self.header_layout = (layout_of(self.log.banks, [n for _, n in self.sizes.values()], gap=2)
                              if self.sizes else self.sha1_layout)
        self.events = Events(events_source, Event(0, 0, pcr, etype, () if self.sizes else self.sha1_layout,
                                                  b"" if self.sizes else bytes(mv[8:28]), data))
        self.log.events = self.events
        self.first = 32 + size  # where the second record starts
        self.total = total
        self.max_events = max_events
        self.progress = progress
        self.short: list[str] = []  # the first event carrying fewer banks than the header
        self.short_n = 0
        self.done = False

    def records(self, buf: bytes, base: int, off: int, final: bool) -> int:
        """Read the records of ``buf`` (the log's bytes from ``base``) from ``off`` on; returns
        where it stopped. Not ``final`` (more of the file follows), a record that runs past the
        window stops the reading there for the caller to read on; ``done`` says the log ended."""
        log, events, sizes = self.log, self.events, self.sizes
        mv = memoryview(buf)
        n = len(buf)
        unpack2 = _HEAD.unpack_from
        unpack_u32 = _U32.unpack_from
        unpack_u16 = _U16.unpack_from
        agile = log.format == "crypto-agile"
        header_layout, progress = self.header_layout, self.progress
        while off < n:
            if len(events) >= self.max_events:
                log.stop_offset = base + off
                log.stop_reason = f"stopped after {self.max_events} events (tpmtop's bound)"
                self.done = True
                return off
            start = off
            if progress is not None and not len(events) % PROGRESS_EVERY:
                progress("reading the event log", base + off, self.total)
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
                if not final:
                    return start  # read on from this record
                if not any(mv[start:]):
                    _padding(log, n - start, base + start)
                else:
                    log.stop_offset, log.stop_reason = base + start, f"truncated: {e}"
                self.done = True
                return start
            except ValueError as e:
                log.stop_offset, log.stop_reason = base + start, str(e)
                self.done = True
                return start
            # the digests as they lie in the record (each after its 2-byte algorithm id): one slice
            rawlen = sum(lens) + 2 * len(lens) if agile else 20
            # an all-zero record: the rest of a fixed-size buffer the firmware did not fill
            if pcr == 0 and etype == 0 and not size and not any(mv[start:]):
                if not final:
                    return start  # zeros to the window's end: whether to the file's, read on to know
                _padding(log, n - start, base + start)
                self.done = True
                return start
            if etype == EV_NO_ACTION and size >= 17 and buf.startswith(STARTUP_LOCALITY, dataoff):
                log.startup_locality = buf[dataoff + 16]
            if not agile:
                lay = self.sha1_layout
            elif got == log.banks:
                lay = header_layout  # shared
            else:
                lay = layout_of(got, lens, gap=2)
            if lay is not header_layout and set(got) != set(log.banks):
                # counted, one note at the end: a crafted log can have a million such events
                if not self.short:
                    self.short.append(f"event {len(events)} (byte {base + start}) carries "
                                      f"{', '.join(got) or 'no digest'}")
                self.short_n += 1
            events.add(base + start, base + dstart, rawlen, base + dataoff, size, lay)
        if final:
            self.done = True
        return off

    def finish(self) -> EventLog:
        if self.short_n:
            n = self.short_n
            self.log.notes.append(f"{n} {'event carries' if n == 1 else 'events carry'} fewer banks than "
                                  f"the header lists (first: {self.short[0]}); the PCRs they extend are not "
                                  f"judged in the banks they lack")
        return self.log


_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")


def parse(buf: bytes, *, max_events: int = MAX_EVENTS, progress: Progress | None = None) -> EventLog:
    """Parse ``buf``; ``progress(stage, done, total)``: called every few thousand records."""
    try:
        p = _Parse(buf, len(buf), buf, max_events, progress)
    except _Short:  # the whole log is the window: the first record's size was checked against it
        raise EventLogError("offset 0: the first event runs past the end: not a TCG event log") from None
    p.records(buf, 0, p.first, final=True)
    return p.finish()


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


WINDOW = 1 << 20  # a log larger than WINDOWED_FROM is read a window of this size at a time
WINDOWED_FROM = 4 << 20  # real firmware logs are tens of KiB: held whole, as parse() does


def parse_file(path: str, progress: Progress | None = None) -> EventLog:
    """Parse the log at ``path``. A regular file over :data:`WINDOWED_FROM` is read a window at
    a time and its events read again from the file where used (50,000 events: 11.8 MB of log
    held, or 1 MB), so ``tpmtop pcrs --events`` on a long log costs little more memory than
    tpm2_eventlog; a smaller one, or one whose size the kernel does not say (securityfs), is
    read whole."""
    reader = _open_large(path)
    data = read_file(path) if reader is None else None  # its errors name the file already
    try:
        if data is not None:
            return parse(data, progress=progress)
        assert reader is not None
        return _parse_windows(reader, progress)
    except EventLogError as e:  # a parse error: which file
        raise EventLogError(f"{path}: {e}") from None


def _open_large(path: str) -> _FileReader | None:
    try:
        fd = boundedread.open_bounded(path, what="event log")
    except (UsageError, OSError):
        return None  # read_file says why, in its words
    size = os.fstat(fd).st_size
    if size <= WINDOWED_FROM or size > MAX_LOG_BYTES:
        os.close(fd)
        return None
    return _FileReader(fd, size, path)


def _parse_windows(reader: _FileReader, progress: Progress | None) -> EventLog:
    size = reader.size
    want = WINDOW
    while True:
        window = reader.read(0, min(want, size))
        try:
            p = _Parse(window, size, reader, MAX_EVENTS, progress)
            break
        except _Short:  # a first record longer than the window (its size was checked against the file's)
            want *= 2
    base, rel = 0, p.first
    while True:
        stop = p.records(window, base, rel, final=base + len(window) >= size)
        if p.done:
            return p.finish()
        # ``stop``: the first record not wholly in the window; a window it did not get past
        # grows (a record up to MAX_EVENT_BYTES, or zeros whose end is not yet known)
        want = want * 2 if stop == rel else WINDOW
        base += stop
        rel = 0
        window = reader.read(base, min(want, size - base))
