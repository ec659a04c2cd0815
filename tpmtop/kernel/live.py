"""Reading tpmtop's kprobe events live, and kernel commands as capture events.

Layer: kernel. No Textual.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable, Iterator

from tpmtop.importers.observed import RC_NOT_TRACED, ObservedExchange
from tpmtop.kernel.trace_pipe import KernelCommand, Parser

MAX_LINE = 64 * 1024  # a trace_pipe line is well under 1 KiB; a longer "line" is junk, dropped


class _Lines:
    """Bytes in, whole lines out, never holding more than MAX_LINE of one line (a 1 GB file
    of NULs is one "line": it is skipped, not read into memory)."""

    def __init__(self) -> None:
        self.buf = b""
        self.skipping = False
        self.dropped = 0  # over-long lines

    def feed(self, chunk: bytes) -> list[str]:
        out = []
        parts = chunk.split(b"\n")
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if self.skipping:
                if not last:
                    self.skipping = False  # the junk line ends here
                continue
            if last:
                self.buf += part
                if len(self.buf) > MAX_LINE:
                    self.buf, self.skipping = b"", True
                    self.dropped += 1
                continue
            line, self.buf = self.buf + part, b""
            if len(line) > MAX_LINE:
                self.dropped += 1
                continue
            out.append(line.decode("utf-8", "replace"))
        return out


def file_lines(path: str, batch: int = 4096) -> Iterator[list[str]]:
    """Batches of lines of a saved trace, read in pieces (memory stays bounded whatever the file)."""
    lines = _Lines()
    with open(path, "rb") as f:
        while True:
            chunk = f.read(65536)
            if not chunk:
                break
            got = lines.feed(chunk)
            if got:
                yield got
        if lines.buf and not lines.skipping:
            yield [lines.buf.decode("utf-8", "replace")]


def read_lines(path: str | int, stop: Callable[[], bool], poll_s: float = 0.2) -> Iterator[list[str]]:
    """Batches of whole lines from a ``trace_pipe`` (a path, or a descriptor opened
    O_NONBLOCK, which stays the caller's), a FIFO, or a file being written (followed like
    ``tail -f``), until ``stop()`` says so (checked every ``poll_s``). A batch is what one
    read returned: a busy kernel's lines are handled a read at a time."""
    own = not isinstance(path, int)
    fd = path if isinstance(path, int) else os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    lines = _Lines()
    try:
        while not stop():
            r, _, _ = select.select([fd], [], [], poll_s)
            if not r:
                continue
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:  # end of a file (or a FIFO without a writer): wait for more
                time.sleep(poll_s)
                continue
            got = lines.feed(chunk)
            if got:
                yield got
    finally:
        if own:
            os.close(fd)


def read_pipe(path: str | int, parser: Parser, stop: Callable[[], bool],
              poll_s: float = 0.2) -> Iterator[KernelCommand]:
    """Commands from a ``trace_pipe`` until ``stop()`` says so (checked every ``poll_s``)."""
    for lines in read_lines(path, stop, poll_s):
        for line in lines:
            yield from parser.feed(line)


def exchanges(commands: list[KernelCommand], t0_unix_ns: int) -> list[ObservedExchange]:
    """Kernel commands on the wall clock: the first command's trace time is ``t0_unix_ns``."""
    if not commands:
        return []
    base = commands[0].t_ns
    out = []
    for kc in commands:
        out.append(ObservedExchange(
            t_unix_ns=t0_unix_ns + kc.t_ns - base, wire_ns=kc.wire_ns, command=None, response=None,
            cc=kc.cc, rc=kc.rc, answered=kc.answered,
            extra={"pid": kc.pid, "comm": kc.comm, "path": kc.path, "cpu": kc.cpu,
                   # tpm_transmit_cmd's return carries the TPM's rc; a command from user space
                   # (or one whose return was lost) may have none the probes could read
                   **({} if kc.rc is not None else {"rc_text": RC_NOT_TRACED}),
                   **({"desc": kc.desc} if kc.desc else {}),
                   **({"caller": kc.caller} if kc.caller else {}),
                   **({"task": kc.task} if kc.task else {}),
                   **({"device": kc.device} if kc.device else {}),
                   **({"session": f"0x{kc.session:08x}"} if kc.session is not None else {}),
                   **({"expected": True} if kc.expected_error else {}),
                   **({"cpu_return": kc.cpu_return} if kc.migrated else {})}))
    return out
