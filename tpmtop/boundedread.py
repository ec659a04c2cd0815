"""Reading a file someone else made, with bounds: size, kind and time. Layer: core; no Textual.

Every file tpmtop reads that it did not write (a health root's dmesg, an event log, a trace, a
capture, a pcap) can be hostile or simply wrong: /dev/zero, a FIFO with no writer, a sparse
1 GB file, random bytes. One rule for all of them, here:

- the file is opened non-blocking, so a FIFO with no writer cannot hang the open, and then
  looked at with ``fstat`` on the open descriptor (no race between the check and the read);
- a FIFO, socket or device is refused (:class:`FileKindError`), except where the caller says
  a character device is expected;
- at most ``limit`` bytes are read; a file that holds more is refused (:class:`FileTooLarge`)
  rather than cut silently, since a replay or a verdict on part of a file would be wrong.

securityfs and procfs files report a size of 0 and are regular files: they are read up to the
limit like any other. The errors are :class:`tpmtop.errors.UsageError` (exit status 2) whose
one line names the file and the bound, never the file's content.
"""

from __future__ import annotations

import os
import stat

from tpmtop.errors import UsageError

MiB = 1024 * 1024

# Defaults by what the file is; each reader passes its own. Sizes seen on real machines are far
# below: a firmware event log is 10-100 KB (tpm2-tools #2243: "> 64 KB" was news), IMA's list a
# few MB on a busy server, a dmesg ring buffer 1-16 MB.
LIMIT_SMALL = 1 * MiB  # /proc/cmdline, sysfs attributes, a kernel config
LIMIT_LOG = 64 * MiB  # dmesg, journal, IMA's list, event logs
LIMIT_TRACE = 512 * MiB  # ftrace / bpftrace output, captures (read in streaming readers)

_CHUNK = 1 * MiB


class FileKindError(UsageError):
    """A FIFO, socket or device where a regular file was expected."""


class FileTooLarge(UsageError):
    """The file holds more than the reader's bound."""


def _kind(mode: int) -> str | None:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISDIR(mode):
        return "a directory"
    return None


def open_bounded(path: str | os.PathLike[str], *, what: str = "file", allow_chardev: bool = False,
                 allow_block: bool = False) -> int:
    """A descriptor open for reading, blocking again, on a regular file (or a character device
    when ``allow_chardev``, a block device when ``allow_block``: a LUKS2 header is read from
    one with bounded preads). Raises :class:`FileKindError`, or OSError as ``open`` does."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        st = os.fstat(fd)
        kind = _kind(st.st_mode)
        if kind is not None and not (allow_chardev and stat.S_ISCHR(st.st_mode)) and not (
                allow_block and stat.S_ISBLK(st.st_mode)):
            raise FileKindError(f"{os.fspath(path)} is {kind}, not a regular file: refused as the {what}")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: str | os.PathLike[str], limit: int, *, what: str = "file") -> bytes:
    """The whole file, at most ``limit`` bytes; more is :class:`FileTooLarge`.

    Reads in chunks rather than trusting ``st_size`` (0 on procfs and securityfs, a lie on a
    file that grows), and stops one byte past the limit."""
    fd = open_bounded(path, what=what)
    try:
        st = os.fstat(fd)
        if st.st_size > limit:
            raise FileTooLarge(f"{os.fspath(path)} is {_size(st.st_size)}, more than the {_size(limit)} "
                               f"tpmtop reads as the {what}")
        parts: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - got))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        if got > limit:
            raise FileTooLarge(f"{os.fspath(path)} holds more than the {_size(limit)} tpmtop reads as the {what}")
        return b"".join(parts)
    finally:
        os.close(fd)


def excerpt(value: object, width: int = 40) -> str:
    """A short, quoted excerpt of an input value for a one-line error (never the whole value)."""
    text = value.decode("latin-1") if isinstance(value, (bytes, bytearray)) else str(value)
    if len(text) <= width:
        return repr(text)
    return f"{text[:width]!r}… ({len(text):,} characters)"


def _size(n: int) -> str:
    if n >= MiB:
        return f"{n / MiB:,.0f} MiB"
    if n >= 1024:
        return f"{n / 1024:,.0f} KiB"
    return f"{n} bytes"
