"""What the proxy reads of /proc to name a client: a file read in one system call when it fits,
and whole when it does not (a command line longer than one read, a read size smaller than the
file), the same bytes as a plain read to the end."""

from __future__ import annotations

import subprocess
import sys
import time

from tpmtop.proxy import procfs


def _whole(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_a_command_line_longer_than_one_read_is_read_whole():
    args = [f"arg{i:05d}-" + "x" * 90 for i in range(1500)]  # ~150 KB: three reads of 64 KiB
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", *args],
                             stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60  # until the child has exec'd (its command line is set)
        while args[-1].encode() not in _whole(f"/proc/{child.pid}/cmdline"):
            assert time.monotonic() < deadline, "the child never started"
            time.sleep(0.01)
        got = procfs.cmdline(child.pid)
        assert got[-1] == args[-1] and len(got) == len(args) + 3
        assert procfs.read(f"/proc/{child.pid}/cmdline") == _whole(f"/proc/{child.pid}/cmdline")
    finally:
        child.kill()
        child.wait()


def test_a_read_size_smaller_than_the_file_still_reads_it_all():
    # A child asleep on its stdin: its status (context switches, memory) and stat (times) stay
    # as they are between two reads, where this process's own move (a status once differed in
    # voluntary_ctxt_switches, 85594 against 85595, under the suite's load)
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        pid = child.pid
        deadline = time.monotonic() + 60
        while not (b"sys.stdin.read()" in _whole(f"/proc/{pid}/cmdline") and _asleep(pid)):
            assert time.monotonic() < deadline, "the child never fell asleep on its stdin"
            time.sleep(0.05)
        for name in ("status", "stat", "cmdline"):
            path = f"/proc/{pid}/{name}"
            small = procfs.read(path, size=16)
            assert small == procfs.read(path) == _whole(path)
            assert len(small) > 16
        assert procfs.tgid(pid) == pid
        assert procfs.stat(pid)[0] == _whole(f"/proc/{pid}/comm").decode().strip()
    finally:
        child.kill()
        child.wait()


def _asleep(pid: int) -> bool:
    """Asleep in a read for a while: state S, and its context switches the same 0.2 s apart."""
    def switches() -> list[bytes]:
        return [ln for ln in _whole(f"/proc/{pid}/status").splitlines() if b"ctxt_switches" in ln]

    before = switches()
    time.sleep(0.2)
    state = _whole(f"/proc/{pid}/stat").rsplit(b")", 1)[1].split()[0]
    return state == b"S" and switches() == before
