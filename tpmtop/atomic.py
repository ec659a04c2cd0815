"""Atomic file writes: a reader (Prometheus' textfile collector, a bug tracker upload, the next
``tpmtop compare``) sees the old file or the new one, never a half-written one.

The data goes to a temporary file in the target's directory (same file system, so the final
``rename`` is atomic), is fsync'ed, then renamed over the target, and the directory is fsync'ed
so the rename itself survives a power cut. If the writer dies — an exception, Ctrl-C, even
SIGKILL — the target is untouched; only the temporary file may stay behind. It is named
``.<target>.<random>.tmp`` so node_exporter (which reads ``*.prom``) never picks it up.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any, cast

# While a big export streams out, a helper thread fdatasyncs every this many bytes, so the
# disk writes the file while Python is still producing it and the final fsync is short.
_BACKGROUND_SYNC_BYTES = 32 * 1024 * 1024


def _umask() -> int:
    # Reading the umask without changing it (os.umask sets it, racing other threads).
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def _target(path: str | os.PathLike[str]) -> str:
    # Through a symlink (a common textfile-collector layout) the file it points to is replaced.
    target = os.path.realpath(os.fspath(path))
    # Only a regular file (or none yet) may be replaced: renaming over /dev/null or a FIFO
    # would swap the node for a plain file. tpmtop.output writes those through instead.
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target
    except OSError:
        return target  # let mkstemp/replace report it
    if not stat.S_ISREG(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", os.fspath(path)) if stat.S_ISDIR(mode) \
            else OSError(errno.EINVAL, "not a regular file: an atomic replace would swap the node "
                                       "for a plain file", os.fspath(path))
    return target


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a directory; the rename is still atomic
        pass
    finally:
        os.close(fd)


class _SyncingWriter:
    """A binary file whose written bytes are pushed to disk by a helper thread while the
    producer goes on (fdatasync releases the GIL)."""

    def __init__(self, f: IO[bytes]):
        self._f = f
        self._pending = 0
        self._wake = threading.Event()
        self._stop = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tpmtop-fsync", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stop:
                return
            try:
                os.fdatasync(self._f.fileno())
            except BaseException as e:  # reported by close()
                self._error = e
                return

    def write(self, data: bytes) -> int:
        n = self._f.write(data)
        self._pending += len(data)
        if self._pending >= _BACKGROUND_SYNC_BYTES:
            self._pending = 0
            self._f.flush()
            self._wake.set()
        return n

    def finish(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join()
        if self._error is not None:
            raise self._error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


@contextmanager
def open_atomic(path: str | os.PathLike[str], text: bool = True,
                background_sync: bool = False) -> Iterator[IO[Any]]:
    """Write ``path`` atomically: ``with open_atomic(p) as f: f.write(...)``.

    The target appears (or is replaced) only when the block ends without an exception.
    ``text=False`` gives a binary file; ``background_sync`` (binary only) suits outputs of
    hundreds of MB.
    """
    if text and background_sync:
        raise ValueError("background_sync needs text=False")
    target = _target(path)
    directory = os.path.dirname(target) or "."
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory)
    raw = None
    sink: _SyncingWriter | None = None
    done = False  # the temporary file became the target
    try:
        # mkstemp creates 0600; the result should have the mode any new file would get (or the
        # old file's), so that e.g. node_exporter running as another user can still read it.
        try:
            mode = os.stat(target).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
        os.fchmod(fd, mode)
        raw = os.fdopen(fd, "wb", buffering=1024 * 1024)
        fd = -1
        syncing = _SyncingWriter(raw) if background_sync else None
        sink = syncing
        if text:
            import io

            # Text mode is for small files; background_sync is for big binary streams.
            f = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
            yield f
            f.flush()
            f.detach()
        else:
            yield cast(IO[Any], syncing if syncing is not None else raw)  # it writes and flushes like one
        if syncing is not None:
            syncing.finish()
            sink = None
        raw.flush()
        os.fsync(raw.fileno())
        raw.close()
        raw = None
        os.replace(tmp, target)
        done = True
        _fsync_dir(directory)
    finally:
        if isinstance(sink, _SyncingWriter):  # the block failed: stop the helper thread
            sink._stop = True
            sink._wake.set()
        if fd >= 0:
            os.close(fd)
        if raw is not None:
            try:
                raw.close()
            except OSError:
                pass
        if not done:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Replace ``path`` with ``data`` atomically (str is written as UTF-8)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open_atomic(path, text=False) as f:
        f.write(data)
