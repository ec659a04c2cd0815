"""What /proc says about a process: its name and start time, command line, status fields.
Read with os.open/os.read rather than psutil or a buffered open(): the proxy names every new
client process with these (:mod:`.peers`), and psutil's Process() and oneshot() read the boot
time and /proc/PID/stat again for each one (~140 µs a process against ~50 µs here, measured in
one run on this project's VM), while a buffered open() adds two fstats, an ioctl and two seeks
per file. Layer: proxy; no Textual."""

from __future__ import annotations

import os

_CLK_TCK = os.sysconf("SC_CLK_TCK")
_boot: list[float] = []  # the boot time, read once


def _boot_time() -> float:
    if not _boot:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    _boot.append(float(line.split()[1]))
                    break
            else:
                _boot.append(0.0)
    return _boot[0]


def read(path: str, size: int = 65536) -> bytes:
    """A whole /proc file in as few system calls as it takes (a buffered open() adds five: two
    fstats, an ioctl and two seeks, per file, per new client). A read that returns less than
    was asked for is the whole file: the files read here are made whole for the first read
    (stat, status) or copied until their end or the size asked (cmdline), so the read that
    would only say "end of file" is left out (one system call per file, per new client)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunk = os.read(fd, size)
        if len(chunk) < size:
            return chunk
        parts = [chunk]
        while chunk:
            chunk = os.read(fd, size)
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


def stat(pid: int) -> tuple[str, float]:
    """(comm, start time) from /proc/PID/stat; the start time as psutil's create_time gives it
    (boot time + start ticks), so that a reused pid is told from the process before it."""
    data = read(f"/proc/{pid}/stat")
    head, _, rest = data.rpartition(b")")  # the name may hold spaces and parentheses
    comm = head.partition(b"(")[2].decode(errors="replace")
    ticks = int(rest.split()[19])  # field 22, starttime; rest starts at field 3
    return comm, _boot_time() + ticks / _CLK_TCK


def cmdline(pid: int) -> list[str]:
    data = read(f"/proc/{pid}/cmdline").decode(errors="replace")
    if not data:
        return []
    if data.endswith("\0"):
        return data[:-1].split("\0")
    return data.split(" ")  # a process that rewrote its arguments as one string


def status_field(pid: int, field: bytes) -> int | None:
    """The first number of a /proc/PID/status line (b"Uid:", b"Tgid:")."""
    for line in read(f"/proc/{pid}/status").splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return None


def tgid(pid: int) -> int | None:
    try:
        return status_field(pid, b"Tgid:")
    except (OSError, ValueError):
        return None


_last_pid_fd: list[int] = []  # /proc/sys/kernel/ns_last_pid, opened once


def last_pid() -> int | None:
    """The pid this pid namespace gave last (/proc/sys/kernel/ns_last_pid), None if unreadable:
    a new client is one of the newest processes, wherever the pid counter is (it wraps).

    Asked for every new client: the file stays open and each read is one pread at offset 0,
    which the kernel answers with the counter as it is now (a sysctl file is formatted anew
    for every read from its start); opening, reading and closing it were three system calls."""
    try:
        if not _last_pid_fd:
            _last_pid_fd.append(os.open("/proc/sys/kernel/ns_last_pid", os.O_RDONLY | os.O_CLOEXEC))
        return int(os.pread(_last_pid_fd[0], 64, 0))
    except (OSError, ValueError):
        return None


_pid_max: list[int] = []  # read once


def pid_max() -> int:
    """The highest pid plus one (/proc/sys/kernel/pid_max): where the counter wraps."""
    if not _pid_max:
        try:
            _pid_max.append(int(read("/proc/sys/kernel/pid_max", 64)))
        except (OSError, ValueError):
            _pid_max.append(1 << 22)  # the kernel's own upper bound
    return _pid_max[0]
