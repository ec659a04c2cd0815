"""Where a subcommand's output file goes (``-o FILE``, ``bench --json FILE``): the rules.

- ``-`` is standard output.
- A regular file (new or existing, also through a symlink) is written atomically
  (:mod:`tpmtop.atomic`): temporary file in the same directory, fsync, rename.
- A character device or a FIFO (``/dev/null``, ``<(…)``, ``mkfifo``), also through a symlink,
  and ``/dev/stdout``, ``/dev/fd/N`` whatever they lead to, are written through, opened as
  they are: never renamed over, so the device node stays what it is (and ``>> log`` appends). A block
  device, a socket or a directory is refused.
- The same file as an input (``export X -o X``) is refused unless ``--force``.
- The destination is checked before the work starts (:meth:`Output.check`): a missing parent
  directory, a read-only file system, an empty name, a directory, or a name ending in ``/``
  (``-o newdir/`` never creates a file) is one line and exit status 2 before a TPM is opened or
  a capture is read.
- If writing still fails at the end (disk full, the directory removed meanwhile), an output
  that cannot be made again (a bench's measurements) is kept in a fallback file in the
  temporary directory, named on stderr, and the exit status is 1.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import IO

from tpmtop.errors import TpmtopError, UsageError

STDOUT = "-"
_FD_PATHS = ("/dev/stdout", "/dev/stderr", "/dev/fd/", "/proc/self/fd/")


def _fd_number(path: str) -> int | None:
    if path in ("/dev/stdout", "/dev/stderr"):
        return 1 if path == "/dev/stdout" else 2
    for prefix in ("/dev/fd/", "/proc/self/fd/"):
        if path.startswith(prefix) and path[len(prefix):].isdigit():
            return int(path[len(prefix):])
    return None


class OutputError(TpmtopError):
    """Writing failed after the work was done (exit status 1); the message says where the
    data went instead, if anywhere."""


class Output:
    """One output destination. ``what`` names it in messages (``--json``, ``-o``)."""

    def __init__(self, path: str | os.PathLike[str], *, what: str = "-o", force: bool = False,
                 inputs: Iterable[str | os.PathLike[str]] = (), refuse_existing: bool = False, big: bool = False):
        self.path = os.fspath(path)
        self.what = what
        self.force = force
        self.inputs = [os.fspath(p) for p in inputs]
        self.refuse_existing = refuse_existing
        self.big = big
        self.kind: str | None = None  # "stdout" | "stream" (device, FIFO) | "file"; set by check()

    # -- before the work ----------------------------------------------------------------------
    def check(self) -> Output:
        """Raise UsageError (exit 2) unless the destination can be written; idempotent."""
        p = self.path
        label = f"{self.what} {p!r}" if not p or p != p.strip() else f"{self.what} {p}"
        if p == STDOUT:
            self.kind = "stdout"
            return self
        if not p:
            raise UsageError(f"{self.what} '': an empty file name")
        if p.endswith(os.sep) or p.endswith(os.sep + ".") or p in (".", ".."):
            raise UsageError(f"{label}: names a directory; give a file name (e.g. {p.rstrip(os.sep) or '.'}/out.json)")
        # os.stat follows symlinks the way open() does, including /proc's magic links
        # (/dev/stdout -> /proc/self/fd/1 -> "pipe:[…]", which realpath cannot name).
        try:
            st = os.stat(p)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise UsageError(f"{label}: {e.strerror}") from None
        real = os.path.realpath(p)
        if st is not None and p.startswith(_FD_PATHS) and not stat.S_ISDIR(st.st_mode):
            # /dev/stdout, /dev/fd/3 …: an open descriptor, whatever it leads to (a file opened
            # for appending by the shell, a terminal): written through, never renamed over.
            self.kind = "stream"
            return self
        if st is not None:
            mode = st.st_mode
            if stat.S_ISDIR(mode):
                raise UsageError(f"{label}: is a directory; give a file name")
            if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
                if stat.S_ISCHR(mode):
                    # Not a FIFO: opening one and closing it would hand its waiting reader an
                    # end of file. A FIFO's problems show up when it is written.
                    self._try_open(label)
                self.kind = "stream"
                self._same_as_input(st, label)
                return self
            if not stat.S_ISREG(mode):
                kind = ("a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
                        else "not a regular file")
                raise UsageError(f"{label}: is {kind}; refusing to write there")
            self._same_as_input(st, label)
            if self.refuse_existing and not self.force:
                raise UsageError(f"{p} exists: pass --force to overwrite it")
        directory = os.path.dirname(real) or "."
        if not os.path.isdir(directory):
            raise UsageError(f"{label}: no such directory {os.path.dirname(p) or '.'}")
        # The rename needs a new file in that directory: try one (permissions, a read-only file
        # system, ACLs, a full inode table all show up here, before the work).
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(real)}.", suffix=".tmp", dir=directory)
        except OSError as e:
            raise UsageError(f"{label}: cannot write in {os.path.dirname(p) or '.'}: {e.strerror}") from None
        os.close(fd)
        os.unlink(tmp)
        self.kind = "file"
        return self

    def _try_open(self, label: str) -> None:
        """Open a character device for writing and close it again: permission, a read-only
        file system, a device that refuses writes show up now."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno == errno.ENXIO:
                return
            raise UsageError(f"{label}: cannot write: {e.strerror}") from None
        os.close(fd)

    def _same_as_input(self, st: os.stat_result, label: str) -> None:
        for inp in self.inputs:
            try:
                ist = os.stat(inp)
            except OSError:
                continue
            if (ist.st_dev, ist.st_ino) == (st.st_dev, st.st_ino) and not self.force:
                raise UsageError(f"{label} is the input {inp}: that would replace what is being read; "
                                 f"give another file (or --force)")

    # -- at the end ---------------------------------------------------------------------------
    @contextmanager
    def open(self) -> Iterator[IO[bytes]]:
        """A binary file to write the output to (see the module doc for what it is). An
        OSError while writing becomes an :class:`OutputError` (one line, exit status 1)."""
        if self.kind is None:
            self.check()
        try:
            with self._open() as f:
                yield f
        except BrokenPipeError:  # the reader of a pipe went away (| head): main() exits quietly
            raise
        except OSError as e:
            raise OutputError(f"cannot write {self.path}: {e.strerror or e}") from e

    @contextmanager
    def _open(self) -> Iterator[IO[bytes]]:
        if self.kind == "stdout":
            out = sys.stdout.buffer
            sys.stdout.flush()
            yield out
            out.flush()
            return
        if self.kind == "stream":
            # O_WRONLY without O_CREAT/O_TRUNC: the node is used as it is, never replaced.
            n = _fd_number(self.path)
            # /dev/stdout and friends: the descriptor itself (dup), so that its offset and
            # O_APPEND hold; opening the path anew would write from the file's start.
            fd = os.dup(n) if n is not None else os.open(self.path, os.O_WRONLY | os.O_NOCTTY)
            with os.fdopen(fd, "wb", buffering=1024 * 1024) as f:
                yield f
            return
        from tpmtop.atomic import open_atomic

        with open_atomic(self.path, text=False, background_sync=self.big) as f:
            yield f

    @property
    def is_file(self) -> bool:
        if self.kind is None:
            self.check()
        return self.kind == "file"

    def write_chunks(self, chunks: Iterable[bytes]) -> None:
        with self.open() as f:
            for c in chunks:
                f.write(c)

    def write(self, data: bytes | str) -> None:
        self.write_chunks([data.encode("utf-8") if isinstance(data, str) else data])

    def write_keeping(self, make_chunks: Callable[[], Iterable[bytes]], *, suffix: str = ".json",
                      label: str = "output") -> None:
        """Write; if the write fails with an OSError (the destination was checked, so this is
        a disk that filled up or a directory that went away), write the same data to a
        fallback file and raise :class:`OutputError` naming it. ``make_chunks`` is called
        again for that, so it must give the same data twice."""
        try:
            self.write_chunks(make_chunks())
            return
        except OutputError as e:
            cause = e.__cause__
            why = getattr(cause, "strerror", None) or str(cause or e)
        fd, fallback = tempfile.mkstemp(prefix=f"tpmtop-{label}-", suffix=suffix)
        try:
            with os.fdopen(fd, "wb") as f:
                for c in make_chunks():
                    f.write(c)
        except OSError as e2:
            try:
                os.unlink(fallback)
            except OSError:
                pass
            raise OutputError(f"cannot write {self.path}: {why}; nor a fallback copy: {e2.strerror}") from None
        raise OutputError(f"cannot write {self.path}: {why}; the {label} is kept in {fallback}")
