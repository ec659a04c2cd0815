"""One line naming the machine a benchmark ran on: every figure in docs/benchmarks.md carries it."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess


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
