"""The one error every line-based importer raises: ``FILE:LINE: why: 'the line'`` (exit 2)."""

from __future__ import annotations

from tpmtop.errors import UsageError


def bad_line(path: str, lineno: int, why: str, line: str) -> UsageError:
    shown = line.strip()
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return UsageError(f"{path}:{lineno}: {why}: {shown!r}")
