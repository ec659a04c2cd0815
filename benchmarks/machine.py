"""One line naming the machine a benchmark ran on (every figure in docs/benchmarks.md carries it),
what one measured process cost, and the end of a process a benchmark started."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import time
from dataclasses import dataclass


def describe() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    swtpm = ""
    if shutil.which("swtpm"):
        words = subprocess.run(["swtpm", "--version"], capture_output=True, text=True).stdout.split()
        swtpm = f", swtpm {words[3].rstrip(',')}" if len(words) > 3 else ""
    return (f"{cpu}, {os.cpu_count()} CPUs, {mem:.0f} GiB RAM, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}{swtpm}")


@dataclass(frozen=True)
class Measured:
    """One process as the kernel accounted it (wait4): wall time from start to exit, CPU time
    (user + system: on a loaded machine the wall time is mostly waiting for a core), peak RSS."""

    wall_s: float
    cpu_s: float
    rss_mb: float
    code: int
    stderr: str


def measured(argv: list[str], cwd: str | None = None, stdout: int | None = subprocess.DEVNULL) -> Measured:
    """Run *argv* to its end, its stderr kept for the failure line, and say what it cost."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, cwd=cwd, stdout=stdout, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    assert p.stderr is not None
    err = p.stderr.read().decode(errors="replace").strip()
    p.stderr.close()
    return Measured(wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), err)


def end(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, then SIGKILL if ``proc`` has not exited within ``timeout`` seconds; reaped either way."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
