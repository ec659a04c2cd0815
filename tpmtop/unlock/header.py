"""A LUKS2 header read by tpmtop itself: the 4 KiB binary header, then its JSON area.

Why not ``cryptsetup luksDump --dump-json-metadata``: cryptsetup takes a lock on the device
(a file under /run/cryptsetup, created if absent), so it writes where tpmtop promises to
write nothing; it needs cryptsetup 2.4+ installed on the machine being diagnosed; and its
errors are several lines. The binary header is 4 KiB of fixed fields (LUKS2 on-disk format,
cryptsetup's docs/on-disk-format-luks2.pdf), so reading it is a few lines: magic, version,
header size, checksum (SHA-256 over the header with its checksum field zeroed, then the JSON
area), then the JSON. The device is opened read-only and read with bounded preads.

LUKS2 keeps two copies (the secondary right after the primary's hdr_size bytes, magic "SKUL"),
and cryptsetup reads whichever passes its checksum, the higher seqid where both do: so does
tpmtop, and it says when the secondary was the one read (:attr:`Luks2Header.note`).

A JSON area larger than :data:`MAX_JSON_AREA` is refused: cryptsetup writes 12 KiB by default
and at most ~4 MiB (``--luks2-metadata-size``), and every token tpmtop reads is a few KiB.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
from dataclasses import dataclass
from typing import Any

from tpmtop.boundedread import excerpt, open_bounded
from tpmtop.errors import UsageError

MAGIC_PRIMARY = b"LUKS\xba\xbe"
MAGIC_SECONDARY = b"SKUL\xba\xbe"
BINARY_HEADER = 4096
# The header sizes LUKS2 allows (binary header + JSON area): 16 KiB to 4 MiB, powers of two.
HEADER_SIZES = frozenset(16384 << i for i in range(9))
# 1 MiB of JSON: ~80 times what cryptsetup writes by default; a larger area is refused in one line.
MAX_JSON_AREA = 1 << 20
_CSUM_OFFSET = 448  # magic 6, version 2, hdr_size 8, seqid 8, label 48, csum_alg 32, salt 64, uuid 40,
#                     subsystem 48, hdr_offset 8, padding 184: the 64-byte checksum starts here
_HDR_OFFSET = 256  # the header's own offset on the device: 0 for the primary, hdr_size for the secondary


class HeaderError(UsageError):
    """Not a readable LUKS2 header (exit status 2): the line names the device and why."""


@dataclass(frozen=True)
class Luks2Header:
    path: str
    uuid: str
    label: str
    metadata: dict[str, Any]  # the JSON area, parsed
    note: str | None = None  # the secondary header was read, and why (an operator wants to know)


def _cstr(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode("ascii", "replace")


def _open_device(path: str) -> int:
    try:
        return open_bounded(path, what="LUKS2 device or image", allow_block=True)
    except PermissionError:
        raise HeaderError(f"{path}: permission denied (reading a LUKS2 header needs read access to the "
                          "device; run as root)") from None
    except FileNotFoundError:
        raise HeaderError(f"{path}: no such device or image") from None
    except IsADirectoryError:
        raise HeaderError(f"{path}: a directory, not a LUKS2 device or image") from None
    except OSError as e:
        raise HeaderError(f"{path}: cannot open ({e.strerror})") from None


def _pread(fd: int, n: int, off: int, path: str) -> bytes:
    try:
        return os.pread(fd, n, off)
    except OSError as e:
        raise HeaderError(f"{path}: cannot read ({e.strerror})") from None


# Where cryptsetup looks for the secondary header when the primary does not say (its magic or
# size is damaged): right after each header size LUKS2 allows, 16 KiB to 4 MiB.
SECONDARY_OFFSETS = tuple(sorted(HEADER_SIZES))


@dataclass(frozen=True)
class _Read:
    seqid: int
    hdr_size: int
    header: Luks2Header


def read_header(path: str) -> Luks2Header:
    """The LUKS2 header of ``path`` (a block device or an image file), checked, as cryptsetup
    reads it: both binary headers and their JSON areas; of the two that pass their checksum,
    the one with the higher seqid; the primary's error where neither does."""
    fd = _open_device(path)
    try:
        st = os.fstat(fd)
        if not stat.S_ISBLK(st.st_mode) and st.st_size < BINARY_HEADER:
            raise HeaderError(f"{path}: {st.st_size} bytes, shorter than a LUKS2 header (4096)")
        primary: _Read | None = None
        primary_error: HeaderError | None = None
        try:
            primary = _read_at(fd, path, 0)
        except HeaderError as e:
            primary_error = e
        if primary_error is not None and not _worth_a_secondary(fd, path):
            raise primary_error
        # The primary's hdr_size says where the secondary is; a damaged primary says nothing
        # trustworthy, so every offset cryptsetup would try is tried.
        offsets = (primary.hdr_size,) if primary is not None else SECONDARY_OFFSETS
        secondary: _Read | None = None
        for off in offsets:
            try:
                secondary = _read_at(fd, path, off)
                break
            except HeaderError:
                continue
    finally:
        os.close(fd)
    if primary is not None and (secondary is None or secondary.seqid <= primary.seqid):
        return primary.header
    if secondary is None:
        assert primary_error is not None
        raise primary_error
    at = f"0x{secondary.hdr_size:x}"
    if primary is None:
        why = str(primary_error).removeprefix(f"{path}: ")
        note = f"the primary header is damaged: {why}; the secondary header at {at} was read, as cryptsetup does"
    else:
        note = (f"the secondary LUKS2 header at {at} is newer than the primary (seqid {secondary.seqid} > "
                f"{primary.seqid}) and was read, as cryptsetup does")
    h = secondary.header
    return Luks2Header(path=h.path, uuid=h.uuid, label=h.label, metadata=h.metadata, note=note)


def _worth_a_secondary(fd: int, path: str) -> bool:
    """Whether a primary that failed may have a secondary to stand in for it: not where the
    device starts with a LUKS1 header or a LUKS2 magic of a version tpmtop does not read (the
    primary's own line is the truer one there)."""
    head = _pread(fd, 8, 0, path)
    return not (len(head) == 8 and head[:6] == MAGIC_PRIMARY and head[6:8] != b"\x00\x02")


def _read_at(fd: int, path: str, off: int) -> _Read:
    """The binary header at ``off`` (0: the primary; else a secondary, whose hdr_offset field
    must say ``off``) and its JSON area, checked."""
    magic_want = MAGIC_PRIMARY if off == 0 else MAGIC_SECONDARY
    hdr = _pread(fd, BINARY_HEADER, off, path)
    if len(hdr) < BINARY_HEADER:
        raise HeaderError(f"{path}: truncated LUKS header ({len(hdr)} of 4096 bytes)")
    magic, version, hdr_size, seqid = struct.unpack_from(">6sHQQ", hdr, 0)
    if magic != magic_want:
        raise HeaderError(f"{path}: not a LUKS device (magic {excerpt(magic, 12)})")
    if version == 1:
        raise HeaderError(f"{path}: a LUKS1 header: LUKS1 has no tokens, so nothing here is sealed to a TPM")
    if version != 2:
        raise HeaderError(f"{path}: LUKS version {version}, not 2")
    if hdr_size not in HEADER_SIZES:
        raise HeaderError(f"{path}: header size {hdr_size} is not one LUKS2 allows (16 KiB to 4 MiB)")
    (hdr_offset,) = struct.unpack_from(">Q", hdr, _HDR_OFFSET)
    if hdr_offset != off:
        raise HeaderError(f"{path}: the header at 0x{off:x} says it is at 0x{hdr_offset:x}")
    json_size = hdr_size - BINARY_HEADER
    if json_size > MAX_JSON_AREA:
        raise HeaderError(f"{path}: a JSON area of {json_size / (1 << 20):.1f} MiB, more than the "
                          f"{MAX_JSON_AREA >> 20} MiB tpmtop reads (cryptsetup writes 12 KiB by default)")
    area = _pread(fd, json_size, off + BINARY_HEADER, path)
    if len(area) < json_size:
        raise HeaderError(f"{path}: truncated LUKS2 header ({BINARY_HEADER + len(area)} of {hdr_size} bytes)")
    alg = _cstr(hdr[24 + 48:24 + 48 + 32])
    if alg != "sha256":
        raise HeaderError(f"{path}: header checksum algorithm {excerpt(alg, 20)}, not sha256")
    zeroed = hdr[:_CSUM_OFFSET] + bytes(64) + hdr[_CSUM_OFFSET + 64:]
    if hashlib.sha256(zeroed + area).digest() != hdr[_CSUM_OFFSET:_CSUM_OFFSET + 32]:
        raise HeaderError(f"{path}: LUKS2 header checksum mismatch (a damaged or hand-edited header)")
    text = area.split(b"\0", 1)[0]
    try:
        meta = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # RecursionError: nested past Python's stack
        raise HeaderError(f"{path}: the LUKS2 JSON area is not JSON ({excerpt(text)})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("tokens", {}), dict):
        raise HeaderError(f"{path}: the LUKS2 JSON area has no tokens object")
    uuid = _cstr(hdr[24 + 48 + 32 + 64:24 + 48 + 32 + 64 + 40])
    return _Read(seqid, hdr_size, Luks2Header(path=path, uuid=uuid, label=_cstr(hdr[24:24 + 48]), metadata=meta))


def is_luks2(path: str) -> bool:
    """Whether ``path`` starts with a LUKS2 magic and version (a quick look for discovery)."""
    try:
        fd = open_bounded(path, what="block device", allow_block=True)
    except (OSError, UsageError):
        return False
    try:
        head = os.pread(fd, 8, 0)
    except OSError:
        return False
    finally:
        os.close(fd)
    return head == MAGIC_PRIMARY + b"\x00\x02"
