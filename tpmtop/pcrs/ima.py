"""IMA's measurement list (``/sys/kernel/security/ima/``), read as a stream.

``ascii_runtime_measurements`` lines are ``PCR TEMPLATE-HASH TEMPLATE FILEDATA-HASH PATH``;
the template hash is SHA-1 there (``ascii_runtime_measurements_sha256`` and siblings carry the
bank named in the file name, kernels ≥ 5.13). ``binary_runtime_measurements`` records are
``pcr u32, SHA-1 template hash[20], name length u32, name, data length u32, data``; for the
ima-ng family the kernel extends every other bank with that bank's hash of the template data
as stored, so one binary list replays every bank. A violation (an all-zero template hash) is
extended as all-ones. Read line by line or record by record: a list of millions of entries
costs the entries kept, not a copy of the file.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from tpmtop import boundedread
from tpmtop.errors import UsageError
from tpmtop.pcrs.eventlog import (
    ALGORITHMS,
    MAX_EVENT_BYTES,
    PROGRESS_EVERY,
    EventLogError,
    Progress,
    layout_of,
    unreadable,
)

MAX_ENTRIES = 5_000_000
def _supported(name: str) -> bool:
    try:
        hashlib.new(name)
    except ValueError:  # sm3_256 where OpenSSL lacks it: such a bank is not replayed
        return False
    return True


_DIGEST_SIZES = {name: size for name, size in ALGORITHMS.values() if _supported(name)}
_BY_HEX_LEN = {2 * size: name for name, size in reversed(list(_DIGEST_SIZES.items()))}


@dataclass(slots=True)
class ImaEntry:
    pcr: int
    # what the kernel extended (a violation: all-ones), concatenated, and where each bank's
    # lies (one layout shared by every entry of a list: see tpmtop.pcrs.eventlog.Event)
    layout: tuple[tuple[str, int, int], ...]
    raw: bytes
    template: str
    path: str
    violation: bool = False

    @property
    def digests(self) -> dict[str, bytes]:
        return {b: self.raw[s:e] for b, s, e in self.layout}


@dataclass
class ImaList:
    source: str
    entries: list[ImaEntry] = field(default_factory=list)
    banks: list[str] = field(default_factory=list)
    stop_offset: int | None = None  # line number (ascii) or byte offset (binary)
    stop_reason: str | None = None


def _bank_from_name(path: str) -> str | None:
    m = re.search(r"_runtime_measurements_(\w+)$", os.path.basename(path))
    return m.group(1) if m else None


def read(path: str, banks: list[str] | None = None, progress: Progress | None = None) -> ImaList:
    """``banks``: the banks to compute from a binary list's template data (default: every
    bank hashlib has); each costs one hash per entry. ``progress(stage, done, None)``: called
    every few thousand entries."""
    try:
        # a FIFO with no writer or a device is refused before any read (tpmtop.boundedread)
        fd = boundedread.open_bounded(path, what="IMA list")
    except (UsageError, OSError) as e:
        raise unreadable(path, e, "IMA's list") from None
    try:
        with os.fdopen(fd, "rb") as f:
            head = f.read(4)
            f.seek(0) if f.seekable() else None
            binary = len(head) == 4 and not head[:1].isdigit()
            if not f.seekable():
                raise EventLogError(f"{path}: IMA's list must be a file tpmtop can read twice")
            return _read_binary(f, path, banks, progress) if binary else _read_ascii(f, path, progress)
    except (FileNotFoundError, PermissionError) as e:
        raise unreadable(path, e, "IMA's list") from None
    except IsADirectoryError:
        raise EventLogError(f"{path}: is a directory, not IMA's list") from None


def _read_ascii(f: BinaryIO, path: str, progress: Progress | None = None) -> ImaList:
    out = ImaList(path)
    named = _bank_from_name(path)
    shared: tuple[tuple[str, int, int], ...] = ()
    for lineno, raw in enumerate(_lines(f), 1):
        if progress is not None and not lineno % PROGRESS_EVERY:
            progress("reading IMA's list", lineno, None)
        if len(out.entries) >= MAX_ENTRIES:
            out.stop_offset, out.stop_reason = lineno, f"stopped after {MAX_ENTRIES} entries (tpmtop's bound)"
            break
        parts = raw.split(None, 4)
        try:
            pcr = int(parts[0])
            hexhash = parts[1]
            bank = named or _BY_HEX_LEN.get(len(hexhash))
            if bank is None:
                raise ValueError(f"a {len(hexhash)}-digit template hash")
            digest = bytes.fromhex(hexhash)
            template = parts[2]
            hint = parts[4].split(" ", 1)[0] if len(parts) > 4 else ""
        except (IndexError, ValueError) as e:
            out.stop_offset, out.stop_reason = lineno, f"line {lineno} is not an IMA entry ({e})"
            break
        violation = not any(digest)
        if violation:
            digest = b"\xff" * len(digest)
        if not out.banks:
            out.banks = [bank]
            shared = layout_of((bank,), (len(digest),))
        elif bank != out.banks[0]:
            out.stop_offset = lineno
            out.stop_reason = f"line {lineno} has a {bank} hash, the lines before {out.banks[0]}"
            break
        out.entries.append(ImaEntry(pcr, shared, digest, sys.intern(template), hint, violation))
    return out


def _lines(f: BinaryIO) -> Iterator[str]:
    while True:
        line = f.readline(MAX_EVENT_BYTES)
        if not line:
            return
        yield line.decode("utf-8", errors="replace").rstrip("\n")


def _read_binary(f: BinaryIO, path: str, banks: list[str] | None, progress: Progress | None = None) -> ImaList:
    sizes = {b: n for b, n in _DIGEST_SIZES.items() if banks is None or b in banks or b == "sha1"}
    out = ImaList(path, banks=list(sizes))
    all_banks = tuple(sizes)
    all_layout = layout_of(all_banks, tuple(sizes.values()))
    sha1_layout = layout_of(("sha1",), (20,))
    total = sum(sizes.values())
    ctors = {b: getattr(hashlib, b, None) or (lambda d, _n=b: hashlib.new(_n, d)) for b in all_banks}
    off = 0
    u32 = struct.Struct("<I").unpack
    while True:
        if len(out.entries) >= MAX_ENTRIES:
            out.stop_offset, out.stop_reason = off, f"stopped after {MAX_ENTRIES} entries (tpmtop's bound)"
            break
        start = off
        if progress is not None and not len(out.entries) % PROGRESS_EVERY:
            progress("reading IMA's list", len(out.entries), None)
        head = f.read(24)
        if not head:
            break
        try:
            if len(head) < 24:
                raise ValueError("truncated entry header")
            pcr = u32(head[:4])[0]
            sha1 = head[4:24]
            nlen = u32(_exact(f, 4))[0]
            if nlen > 255:
                raise ValueError(f"template name of {nlen} bytes")
            name = _exact(f, nlen).decode("ascii", errors="replace")
            dlen = u32(_exact(f, 4))[0]
            if dlen > MAX_EVENT_BYTES:
                raise ValueError(f"template data of {dlen} bytes")
            tdata = _exact(f, dlen)
        except ValueError as e:
            out.stop_offset, out.stop_reason = start, f"byte {start}: {e}"
            break
        off = start + 24 + 4 + nlen + 4 + dlen
        violation = not any(sha1)
        if violation:
            raw, lay = b"\xff" * total, all_layout
        elif name == "ima":  # the legacy template: SHA-1 alone
            raw, lay = sha1, sha1_layout
        else:  # the ima-ng family: the bank's hash of the template data
            raw = b"".join(sha1 if b == "sha1" else ctors[b](tdata).digest() for b in all_banks)
            lay = all_layout
        out.entries.append(ImaEntry(pcr, lay, raw, sys.intern(name), _hint(name, tdata), violation))
    if any(e.template == "ima" for e in out.entries):
        out.banks = ["sha1"]
    return out


def _exact(f: BinaryIO, n: int) -> bytes:
    b = f.read(n)
    if len(b) != n:
        raise ValueError("truncated entry")
    return b


def _hint(name: str, tdata: bytes) -> str:
    """The file name field of an ima-ng/ima-sig entry (its second length-prefixed field)."""
    try:
        n0 = struct.unpack_from("<I", tdata)[0]
        p = 4 + n0
        n1 = struct.unpack_from("<I", tdata, p)[0]
        return tdata[p + 4:p + 4 + n1].split(b"\0", 1)[0].decode("utf-8", errors="replace")
    except struct.error:
        return ""
