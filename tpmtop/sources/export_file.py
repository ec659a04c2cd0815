"""The dashboard's x key: a capture written to a timestamped file in tpmtop's data directory
(never the current directory, never over an existing file). No Textual here.

The key names the file at once (:func:`export_target`, a few file-system calls on the UI
thread) so the user sees the full path within a frame; a worker then writes the capture
(:func:`export_capture`, seconds with many events) and publishes it under that name — or
the next free one, if another writer took the name meanwhile.
"""

from __future__ import annotations

import datetime as _dt
import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DATA_DIR_MODE = 0o700  # captures name the TPM and what ran on it: the owner's only
# Names handed out and not yet written: x pressed twice within a second gets two names.
_pending: set[Path] = set()
_pending_lock = threading.Lock()


def data_dir() -> Path:
    """``$XDG_DATA_HOME/tpmtop`` (``~/.local/share/tpmtop`` when unset or not absolute, as the
    XDG base directory specification says), not created here."""
    base = os.environ.get("XDG_DATA_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "tpmtop"


def ensure_dir(directory: str | os.PathLike[str] | None) -> Path:
    """The export directory: ``directory`` as given (it must exist), or :func:`data_dir`,
    created with mode 0700 (parents too) if missing. An existing one is left as it is."""
    if directory is not None:
        return Path(directory).resolve()
    d = data_dir()
    missing = []
    p = d
    while not os.path.lexists(p):
        missing.append(p)
        p = p.parent
    # Every directory made here is 0700, as the XDG spec asks (makedirs would make the parents,
    # a missing ~/.local/share say, with the umask's permissions); tpmtop's own is made 0700
    # whatever the umask.
    for p in reversed(missing):
        try:
            os.mkdir(p, DATA_DIR_MODE)
        except FileExistsError:
            pass
    if missing:
        os.chmod(d, DATA_DIR_MODE)
    return d.resolve()


def _candidates(directory: Path, now: _dt.datetime) -> Iterator[Path]:
    base = f"tpmtop-{now:%Y%m%d-%H%M%S}"
    yield directory / f"{base}.json"
    n = 1
    while True:
        n += 1
        yield directory / f"{base}-{n}.json"


def export_target(directory: str | os.PathLike[str] | None = None, now: _dt.datetime | None = None) -> Path:
    """The file an export will be written to: ``tpmtop-YYYYmmdd-HHMMSS.json`` in
    :func:`ensure_dir`'s directory (``-2``, ``-3`` … when taken). Cheap: the UI thread calls
    it to show the path before the write starts."""
    d = ensure_dir(directory)
    with _pending_lock:
        target = next(p for p in _candidates(d, now or _dt.datetime.now())
                      if p not in _pending and not os.path.lexists(p))
        _pending.add(target)
    return target


def release_target(target: str | os.PathLike[str]) -> None:
    """The export named ``target`` will not be written (its capture could not be built)."""
    with _pending_lock:
        _pending.discard(Path(target))


def export_capture(cap: dict[str, Any], target: str | os.PathLike[str]) -> Path:
    """Write ``cap`` to ``target`` (from :func:`export_target`) and return where it went.

    Validated against the capture schema and written atomically by the one writer every
    capture goes through (so `tpmtop replay` reads what it wrote) — to a hidden staging name
    first, then published with ``link()``, which never replaces an existing file: if the name
    was taken since it was chosen, the next free one is used. If the folder cannot take it
    after all, the capture is kept in a fallback file named in the OutputError's message."""
    from tpmtop.capture import write_capture

    target = Path(target)
    staging = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        write_capture(staging, cap, keep=True)
        stem = target.stem
        for path in [target, *(target.with_name(f"{stem}-{n}.json") for n in range(2, 1000))]:
            try:
                os.link(staging, path)
            except FileExistsError:
                continue
            except OSError as e:
                if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise
                # No hard links on this file system (vfat, some FUSE): a rename, checked just
                # before; only a writer racing in that instant could be replaced.
                if os.path.lexists(path):
                    continue
                os.rename(staging, path)
            return path.resolve()
        raise FileExistsError(errno.EEXIST, "no free export name", str(target))
    finally:
        release_target(target)
        try:
            os.unlink(staging)
        except FileNotFoundError:
            pass
