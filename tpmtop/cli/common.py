"""Helpers shared by the subcommands: opening the TPM from parsed args, printing."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager

from tpmtop.errors import UsageError


def notice(text: str) -> None:
    print(f"tpmtop: {text}", file=sys.stderr)


@contextmanager
def tpm_from_args(args, recorder=None):
    from tpmtop.connect import open_tpm

    conn = open_tpm(tcti=getattr(args, "tcti", None), sim=getattr(args, "sim", False),
                    raw_device=getattr(args, "raw_device", False), recorder=recorder, notice=notice)
    try:
        yield conn
    finally:
        conn.close()


def refuse_if_read_only(args, what: str) -> None:
    if getattr(args, "read_only", False):
        raise UsageError(f"--read-only: refusing to {what}")


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")


def table(rows: list[list[str]], header: list[str], right: set[int] = frozenset()) -> str:
    widths = [len(h) for h in header]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))

    def fmt(r):
        return "  ".join(c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)).rstrip()

    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])
