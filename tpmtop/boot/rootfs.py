"""Reading a system's files under a root directory (``--root``), with reasons instead of failures.

Every path is given as it appears on the running system ("/proc/cmdline") and is read under
``root``, so a fixture tree in tests looks like a real machine. A file that cannot be read is
not an error for ``tpmtop boot``: it becomes an :class:`Unavailable` whose message says why
(absent, permission denied and who can read it, not Linux), which the report then shows.

Output of commands (``dmesg``, ``systemd-analyze``) has no file on a live system. Convention:
when ``root`` is ``/`` the command runs; under any other root the output is read from
``<root>/run/tpmtop/<command>.txt``, which is also where a user can save a copy taken on
another machine (``dmesg > /mnt/x/run/tpmtop/dmesg.txt``).

Every file is read with :mod:`tpmtop.boundedread`: a FIFO, socket or device (``dmesg.txt``
linked to /dev/zero, a FIFO at ``proc/cmdline``) is refused without blocking, and a file over
its bound (:func:`limit_for`) is refused before it is read. Under a ``--root`` tree that is the
input's fault: :class:`tpmtop.errors.UsageError`, one line, exit status 2. On the live system
(root ``/``) it becomes an :class:`Unavailable` like any other unreadable fact, so one odd file
does not end a report or the exporter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tpmtop.boundedread import LIMIT_LOG, LIMIT_SMALL, FileKindError, FileTooLarge, excerpt, open_bounded, read_bounded
from tpmtop.errors import UsageError

SAVED_OUTPUT_DIR = "/run/tpmtop"

# Files that are logs or lists (read whole up to LIMIT_LOG, 64 MiB); every other file under a
# root is a sysfs/procfs attribute or /proc/cmdline, a few KB at most (LIMIT_SMALL, 1 MiB: the
# kernel's own command line is at most a few KB, COMMAND_LINE_SIZE).
_LOG_PREFIXES = (SAVED_OUTPUT_DIR + "/", "/sys/kernel/security/", "/boot/config-", "/proc/config.gz",
                 "/proc/interrupts")


def limit_for(path: str) -> int:
    """The most bytes tpmtop reads of ``path`` (as it appears on the running system)."""
    return LIMIT_LOG if path.startswith(_LOG_PREFIXES) else LIMIT_SMALL


class Unavailable(Exception):
    """A fact that could not be read; ``str()`` is the reason shown to the user."""


class RootReader:
    def __init__(self, root: str = "/", euid: int | None = None) -> None:
        self.root = os.path.abspath(root)
        self.shown_root = root  # as the user typed it, for the report's header
        self.euid = os.geteuid() if euid is None and hasattr(os, "geteuid") else (euid or 0)

    @property
    def live(self) -> bool:
        return self.root == "/"

    def host_path(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    # Tests subclass these two to play a non-root reader: CI runs as root, and root ignores
    # chmod, so an unreadable file cannot be made on disk there.
    def _read(self, host_path: str, limit: int, *, whole: bool = True) -> bytes:
        if whole:
            return read_bounded(host_path, limit, what="system file")
        fd = open_bounded(host_path, what="system file")
        try:
            parts: list[bytes] = []
            got = 0
            while got < limit:
                chunk = os.read(fd, min(1 << 20, limit - got))
                if not chunk:
                    break
                parts.append(chunk)
                got += len(chunk)
            return b"".join(parts)
        finally:
            os.close(fd)

    def _listdir(self, host_path: str) -> list[str]:
        return os.listdir(host_path)

    def _why(self, path: str, e: OSError) -> Unavailable:
        if isinstance(e, PermissionError):
            who = "root only" if self.euid != 0 else "no one (even root was refused)"
            hint = "; run as root (sudo)" if self.euid != 0 else ""
            return Unavailable(f"permission denied on {path} (readable by {who}, running as uid {self.euid}){hint}")
        if isinstance(e, FileNotFoundError):
            if self.live and not sys.platform.startswith("linux"):
                return Unavailable(f"{path} absent: not Linux ({sys.platform})")
            return Unavailable(f"{path} absent")
        if isinstance(e, IsADirectoryError):
            return Unavailable(f"{path} is a directory")
        return Unavailable(f"cannot read {path}: {e.strerror or e}")

    def read_bytes(self, path: str, limit: int | None = None, *, whole: bool = True) -> bytes:
        """The file, refused over ``limit`` (:func:`limit_for` by default); with ``whole`` False
        only its first ``limit`` bytes, whatever follows."""
        if "\0" in path:  # a name made from a file's bytes (a garbled osrelease): no such file
            raise Unavailable(f"{excerpt(path)} is not a path")
        try:
            return self._read(self.host_path(path), limit_for(path) if limit is None else limit, whole=whole)
        except (FileKindError, FileTooLarge) as e:
            if self.live:
                raise Unavailable(str(e)) from None
            raise
        except OSError as e:
            raise self._why(path, e) from None

    def read_start(self, path: str, n: int) -> bytes:
        """The first ``n`` bytes at most (a sample of a list that may be longer than any bound:
        IMA's on a busy server); the file's kind is checked as for :meth:`read_bytes`."""
        return self.read_bytes(path, n, whole=False)

    def read_text(self, path: str) -> str:
        """The file as text. A NUL byte means it is not: random bytes, a binary file saved under a
        text file's name. Under a ``--root`` tree that is bad input (UsageError, exit 2), never a
        report built on garbage; on the live system the fact is unavailable."""
        raw = self.read_bytes(path)
        nul = raw.find(b"\0")
        if nul >= 0:
            why = f"{self.host_path(path)}: binary data, not text (a NUL byte at offset {nul:,})"
            if self.live:
                raise Unavailable(why)
            raise UsageError(why)
        return raw.decode("utf-8", "replace")

    def read_line(self, path: str) -> str:
        return self.read_text(path).strip()

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(self._listdir(self.host_path(path)))
        except OSError as e:
            raise self._why(path, e) from None

    def exists(self, path: str) -> bool:
        return os.path.lexists(self.host_path(path))

    def readlink_name(self, path: str) -> str:
        """Last component of a symlink's target (sysfs ``driver`` links name the driver)."""
        try:
            return os.path.basename(os.readlink(self.host_path(path)))
        except OSError as e:
            raise self._why(path, e) from None

    def command_output(self, argv: list[str], timeout: float = 10.0) -> tuple[str, str]:
        """``(text, source)``: the command's stdout on the live system, else the saved copy."""
        name = argv[0]
        if not self.live:
            saved = f"{SAVED_OUTPUT_DIR}/{name}.txt"
            return self.read_text(saved), saved
        exe = shutil.which(name)
        if exe is None:
            raise Unavailable(f"`{name}` not installed")
        try:
            p = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=timeout,
                               errors="replace")
        except (OSError, subprocess.TimeoutExpired) as e:
            raise Unavailable(f"`{' '.join(argv)}` failed: {e}") from None
        if p.returncode != 0:
            err = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
            raise Unavailable(f"`{' '.join(argv)}` failed: {err}")
        return p.stdout, f"`{' '.join(argv)}`"
