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
from collections.abc import Iterator
from dataclasses import dataclass, field

from tpmtop.pcrs.eventlog import ALGORITHMS, MAX_EVENT_BYTES, EventLogError

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
    digests: dict[str, bytes]  # bank -> what the kernel extended (a violation: all-ones)
    template: str
    path: str
    violation: bool = False


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


def read(path: str) -> ImaList:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            f.seek(0) if f.seekable() else None
            binary = len(head) == 4 and not head[:1].isdigit()
            if not f.seekable():
                raise EventLogError(f"{path}: IMA's list must be a file tpmtop can read twice")
            return _read_binary(f, path) if binary else _read_ascii(f, path)
    except FileNotFoundError:
        raise EventLogError(f"{path}: no such file") from None
    except PermissionError:
        raise EventLogError(f"{path}: permission denied (IMA's list is readable by root only)") from None
    except IsADirectoryError:
        raise EventLogError(f"{path}: is a directory, not IMA's list") from None


def _read_ascii(f, path: str) -> ImaList:
    out = ImaList(path)
    named = _bank_from_name(path)
    for lineno, raw in enumerate(_lines(f), 1):
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
        out.entries.append(ImaEntry(pcr, {bank: digest}, template, hint, violation))
    return out


def _lines(f) -> Iterator[str]:
    while True:
        line = f.readline(MAX_EVENT_BYTES)
        if not line:
            return
        yield line.decode("utf-8", errors="replace").rstrip("\n")


def _read_binary(f, path: str) -> ImaList:
    out = ImaList(path, banks=list(_DIGEST_SIZES))
    off = 0
    u32 = struct.Struct("<I").unpack
    while True:
        if len(out.entries) >= MAX_ENTRIES:
            out.stop_offset, out.stop_reason = off, f"stopped after {MAX_ENTRIES} entries (tpmtop's bound)"
            break
        start = off
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
        digests: dict[str, bytes] = {}
        for bank, size in _DIGEST_SIZES.items():
            if violation:
                digests[bank] = b"\xff" * size
            elif bank == "sha1":
                digests[bank] = sha1
            elif name != "ima":  # the ima-ng family: the bank's hash of the template data
                digests[bank] = hashlib.new(bank, tdata).digest()
        out.entries.append(ImaEntry(pcr, digests, name, _hint(name, tdata), violation))
    if any(e.template == "ima" for e in out.entries):
        out.banks = ["sha1"]
    return out


def _exact(f, n: int) -> bytes:
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
