"""Loading an imported kernel trace: sniff the format, hand the lines to its parser.

The data model (Series, TraceResult, the kernel TPM function tables) lives in
:mod:`tpmtop.boot.series`, imported from there; the parsers import only that, so this module
can import them at the top without a cycle.
"""

from __future__ import annotations

import itertools
import os
import re
import stat
from collections.abc import Iterable, Iterator
from typing import IO

from tpmtop.boot.bpftrace import parse_bpftrace
from tpmtop.boot.ftrace import looks_like_row, parse_function_graph
from tpmtop.boot.series import TraceResult
from tpmtop.boundedread import LIMIT_TRACE, FileTooLarge, MiB, open_bounded
from tpmtop.errors import UsageError

# a bpftrace map's first line: "@[" (a stack key), "@name[…", "@name: value" — not any line
# that opens with "@" (random bytes did, one file in a few hundred, and were called bpftrace)
_BPF_MAP = re.compile(r"@\w*(\[|: )")


def _classify(line: str) -> str | None:
    """One line's say on the format: "ftrace", "bpftrace", "neither", or None (no say)."""
    s = line.strip()
    if not s:
        return None
    if s.startswith("# tracer:") or s.startswith("# CPU") or "FUNCTION CALLS" in s:
        return "ftrace"
    if _BPF_MAP.match(s) or s.startswith("Attaching ") or s == "^C":
        return "bpftrace"
    if line.startswith("#"):
        return None
    if looks_like_row(line):
        return "ftrace"
    return "neither"


FORMAT_NAMES = {"ftrace": "an ftrace function_graph trace", "bpftrace": "bpftrace map output"}


def sniff_format(lines: Iterable[str]) -> str | None:
    """What kind of trace ``lines`` (the start of a file) are, for a reader that found none of
    its own events there: "ftrace", "bpftrace", or None (neither; not enough said yet)."""
    for line in lines:
        if line.startswith("# tracer:") and "function_graph" not in line:
            return None  # tracefs with another tracer (kprobe events come under "nop")
        kind = _classify(line)
        if kind is not None:
            return None if kind == "neither" else kind
    return None


MAX_LINE = 64 * 1024  # an ftrace row is ~100 bytes, a bpftrace map line a few hundred


def _text_lines(f: IO[bytes], path: str) -> Iterator[str]:
    """The file's lines as text, one at a time (a trace can be hundreds of MB). A line is read
    with a bound (a 1 GB file of zeros is one line: it was read whole) and must be text."""
    lineno = 0
    while True:
        raw = f.readline(MAX_LINE + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) > MAX_LINE:
            raise UsageError(f"{path}:{lineno}: a line longer than {MAX_LINE // 1024} KiB: not a text trace")
        nul = raw.find(b"\0")
        if nul >= 0:
            raise UsageError(f"{path}:{lineno}: not a text trace (a NUL byte at column {nul + 1})")
        try:
            yield raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as e:
            raise UsageError(f"{path}:{lineno}: not a text trace (byte 0x{raw[e.start]:02x} is not UTF-8)") from None


def load_trace(path: str, unit: str | None = None) -> TraceResult:
    """Streams the file: memory grows with the number of TPM calls, not with the file. A FIFO is
    read as it is written (a trace piped from a running ftrace); a device or socket is refused
    and a file over LIMIT_TRACE (512 MiB) too (:mod:`tpmtop.boundedread`); every line has a
    bound (MAX_LINE), so neither a FIFO nor a sparse file is held whole."""
    try:
        if stat.S_ISFIFO(os.stat(path).st_mode):
            fd, size = os.open(path, os.O_RDONLY | os.O_CLOEXEC), 0
        else:
            fd = open_bounded(path, what="trace")
            size = os.fstat(fd).st_size
    except OSError as e:
        raise UsageError(f"{path}: cannot read trace: {e.strerror or e}") from None
    f = os.fdopen(fd, "rb")
    if size > LIMIT_TRACE:
        f.close()
        raise FileTooLarge(f"{path} is {size / MiB:,.0f} MiB, more than the {LIMIT_TRACE // MiB} MiB "
                           "tpmtop reads as a trace")
    with f:
        lines = _text_lines(f, path)
        head: list[str] = []
        kind = None
        try:
            for line in lines:
                head.append(line)
                kind = _classify(line)
                if kind is not None:
                    break
        except OSError as e:
            raise UsageError(f"{path}: cannot read trace: {e.strerror or e}") from None
        rest = itertools.chain(head, lines)
        try:
            if kind == "ftrace":
                return parse_function_graph(rest, path)
            if kind == "bpftrace":
                return parse_bpftrace(rest, path, unit=unit)
        except OSError as e:
            raise UsageError(f"{path}: cannot read trace: {e.strerror or e}") from None
    first = next((i for i, ln in enumerate(head, 1) if ln.strip() and not ln.startswith("#")), 1)
    raise UsageError(f"{path}:{first}: neither ftrace function_graph nor bpftrace map output")
