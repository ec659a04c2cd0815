"""Reading tpmtop's kprobe events live, and kernel commands as capture events.

Layer: kernel. No Textual.
"""

from __future__ import annotations

import os
import select
import time
from typing import Callable, Iterator

from tpmtop.importers.observed import RC_NOT_TRACED, Exchange
from tpmtop.kernel.trace_pipe import KernelCommand, Parser


def read_lines(path: str | int, stop: Callable[[], bool], poll_s: float = 0.2) -> Iterator[list[str]]:
    """Batches of whole lines from a ``trace_pipe`` (a path, or a descriptor opened
    O_NONBLOCK, which stays the caller's), a FIFO, or a file being written (followed like
    ``tail -f``), until ``stop()`` says so (checked every ``poll_s``). A batch is what one
    read returned: a busy kernel's lines are handled a read at a time."""
    own = not isinstance(path, int)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK) if own else path
    buf = b""
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
            buf += chunk
            *lines, buf = buf.split(b"\n")
            if lines:
                yield [line.decode("utf-8", "replace") for line in lines]
    finally:
        if own:
            os.close(fd)


def read_pipe(path: str | int, parser: Parser, stop: Callable[[], bool], poll_s: float = 0.2) -> Iterator[KernelCommand]:
    """Commands from a ``trace_pipe`` until ``stop()`` says so (checked every ``poll_s``)."""
    for lines in read_lines(path, stop, poll_s):
        for line in lines:
            yield from parser.feed(line)


def exchanges(commands: list[KernelCommand], t0_unix_ns: int) -> list[Exchange]:
    """Kernel commands on the wall clock: the first command's trace time is ``t0_unix_ns``."""
    if not commands:
        return []
    base = commands[0].t_ns
    out = []
    for kc in commands:
        out.append(Exchange(
            t_unix_ns=t0_unix_ns + kc.t_ns - base, wire_ns=kc.wire_ns, command=None, response=None,
            cc=kc.cc, rc=kc.rc, answered=kc.ret is not None and kc.ret >= 0,
            extra={"pid": kc.pid, "comm": kc.comm, "path": kc.path, "cpu": kc.cpu,
                   # tpm_transmit_cmd's return carries the TPM's rc; a command from user space
                   # (or one whose return was lost) may have none the probes could read
                   **({} if kc.rc is not None else {"rc_text": RC_NOT_TRACED}),
                   **({"desc": kc.desc} if kc.desc else {}),
                   **({"caller": kc.caller} if kc.caller else {}),
                   **({"task": kc.task} if kc.task else {}),
                   **({"device": kc.device} if kc.device else {}),
                   **({"session": f"0x{kc.session:08x}"} if kc.session is not None else {}),
                   **({"cpu_return": kc.cpu_return} if kc.migrated else {})}))
    return out
