"""Helpers shared by the subcommands: opening the TPM from parsed args, printing."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Set
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tpmtop.errors import UsageError

if TYPE_CHECKING:
    from tpmtop.recorder import Recorder
    from tpmtop.tpm.connection import TpmConnection


def notice(text: str) -> None:
    """One line on stderr. Notices quote files and captures: made safe for a terminal."""
    from tpmtop.textsafe import safe

    print(f"tpmtop: {safe(text)}", file=sys.stderr)


@contextmanager
def tpm_from_args(args: argparse.Namespace, recorder: Recorder | None = None) -> Iterator[TpmConnection]:
    from tpmtop.connect import open_tpm

    conn = open_tpm(tcti=getattr(args, "tcti", None), sim=getattr(args, "sim", False),
                    raw_device=getattr(args, "raw_device", False), recorder=recorder, notice=notice,
                    timeout=getattr(args, "timeout", None))
    try:
        yield conn
    finally:
        conn.close()


def refuse_if_read_only(args: argparse.Namespace, what: str) -> None:
    if getattr(args, "read_only", False):
        raise UsageError(f"--read-only: refusing to {what}")


def print_json(obj: object) -> None:
    """Strict JSON on stdout: a non-finite number (a ratio of extreme values) becomes null,
    never a bare NaN/Infinity that JSON parsers refuse. ASCII-escaped, so no string from a
    file can reach the terminal raw."""
    import json  # here: `tpmtop info` without --json over SSH does not pay for it

    json.dump(_finite(obj), sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


def _finite(obj: object) -> object:
    if isinstance(obj, float):
        return obj if obj - obj == 0.0 else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def table(rows: list[list[str]], header: list[str], right: Set[int] = frozenset()) -> str:
    widths = [len(h) for h in header]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))

    def fmt(r: list[str]) -> str:
        return "  ".join(c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)).rstrip()

    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def is_stdout(path: str | None) -> bool:
    """Whether a data file named on the command line is stdout itself (``-``, or /dev/stdout
    and the like: the same open file): the human-readable report then goes to stderr, so
    stdout stays one parseable document."""
    import os

    if path is None:
        return False
    if path == "-":
        return True
    try:
        a, b = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
