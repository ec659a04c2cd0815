"""Reading a system's files under a root directory (``--root``), with reasons instead of failures.

Every path is given as it appears on the running system ("/proc/cmdline") and is read under
``root``, so a fixture tree in tests looks like a real machine. A file that cannot be read is
not an error for ``tpmtop boot``: it becomes an :class:`Unavailable` whose message says why
(absent, permission denied and who can read it, not Linux), which the report then shows.

Output of commands (``dmesg``, ``systemd-analyze``) has no file on a live system. Convention:
when ``root`` is ``/`` the command runs; under any other root the output is read from
``<root>/run/tpmtop/<command>.txt``, which is also where a user can save a copy taken on
another machine (``dmesg > /mnt/x/run/tpmtop/dmesg.txt``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

SAVED_OUTPUT_DIR = "/run/tpmtop"


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
    def _read(self, host_path: str) -> bytes:
        with open(host_path, "rb") as f:
            return f.read()

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

    def read_bytes(self, path: str) -> bytes:
        try:
            return self._read(self.host_path(path))
        except OSError as e:
            raise self._why(path, e) from None

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode("utf-8", "replace")

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
