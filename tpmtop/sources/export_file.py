"""The dashboard's x key: a capture written to a timestamped file that never replaces an
earlier one. No Textual here."""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any


def export_capture(cap: dict[str, Any], directory: str | os.PathLike[str] = ".",
                   now: _dt.datetime | None = None) -> Path:
    """Write ``tpmtop-YYYYmmdd-HHMMSS.json`` atomically; never overwrite an earlier export."""
    now = now or _dt.datetime.now()
    d = Path(directory)
    base = f"tpmtop-{now:%Y%m%d-%H%M%S}"
    path = d / f"{base}.json"
    n = 1
    while path.exists():
        n += 1
        path = d / f"{base}-{n}.json"
    # Validated against the capture schema and written atomically (temp file, fsync, rename):
    # the one writer every capture goes through, so `tpmtop replay` reads what it wrote. If
    # the folder cannot take it after all, the capture is kept in a fallback file (named in
    # the OutputError's message) rather than lost.
    from tpmtop.capture import write_capture

    write_capture(path, cap, keep=True)
    return path.resolve()

