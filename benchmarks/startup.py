#!/usr/bin/env python3
"""What tpmtop's start-up costs over SSH: each command against ``python -c pass``.

    .venv/bin/python benchmarks/startup.py [--rounds 15] [--baseline DIR]

Every round runs, back to back and in a rotating order, the floor (``python -c pass`` with
the same interpreter and venv), swtpm's own start-up (a private swtpm started and stopped
the way ``--sim`` does it, timed in this process) and each tpmtop command below. Each
command's figure is its wall time minus the floor's *in the same round* (load hits both
alike), as a median over the rounds, with the best and worst round beside it.

``info --sim`` and ``handles --sim`` are also printed over python + swtpm's start-up: the
target is ≤ +150 ms there. The last line is the verdict:
``startup: --version +<A> ms, --help +<B> ms over python`` (targets A ≤ 40, B ≤ 80).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from machine import describe  # noqa: E402 - benchmarks/machine.py

TPMTOP = [sys.executable, "-m", "tpmtop"]
COMMANDS = {
    "--version": ["--version"],
    "--help": ["--help"],
    "info --sim": ["info", "--sim"],
    "handles --sim": ["handles", "--sim"],
    "clients": ["clients"],
    "boot": ["boot"],
    "kernel --help": ["kernel", "--help"],
}
SIM = ("info --sim", "handles --sim")
SIM_NAMES = set(SIM)


def wall(cmd: list[str], src: Path = HERE.parent) -> float:
    """Seconds from fork to exit; output discarded (an SSH session's terminal is not timed)."""
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                   cwd=src, env=dict(ENV, PYTHONPATH=str(src)))
    return time.perf_counter() - t


def swtpm_startup() -> float:
    from tpmtop.tpm.sim import Swtpm

    t = time.perf_counter()
    Swtpm().start().stop()
    return time.perf_counter() - t


ENV = dict(os.environ, TSS2_LOG="all+NONE")
# What a user runs is byte-compiled (pip writes the .pyc files): with PYTHONDONTWRITEBYTECODE set
# every round would compile each tpmtop module again, and the warm-up run below could not cache them.
ENV.pop("PYTHONDONTWRITEBYTECODE", None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--baseline", metavar="DIR",
                    help="also each command from another checkout of tpmtop, in the same rounds (a before/after)")
    a = ap.parse_args()
    steps = [("python", lambda: wall([sys.executable, "-c", "pass"])), ("swtpm", swtpm_startup)]
    steps += [(name, functools.partial(wall, TPMTOP + args)) for name, args in COMMANDS.items()]
    if a.baseline:
        base_dir = Path(a.baseline).resolve()
        steps += [(f"{name} (baseline)", functools.partial(wall, TPMTOP + args, base_dir))
                  for name, args in COMMANDS.items()]
        SIM_NAMES.update(f"{n} (baseline)" for n in SIM)
    wall(TPMTOP + ["--version"])  # byte-compiles whatever is stale, outside the rounds
    over: dict[str, list[float]] = {name: [] for name, _ in steps}
    raw: dict[str, list[float]] = {name: [] for name, _ in steps}
    for r in range(a.rounds):
        got = {}
        k = r % len(steps)
        for name, step in steps[k:] + steps[:k]:
            got[name] = step()
        for name in got:
            raw[name].append(got[name])
            base = got["python"] + (got["swtpm"] if name in SIM_NAMES else 0.0)
            over[name].append(got[name] - base)
    ms = 1000.0
    print(f"machine: {describe()}")
    print(f"{a.rounds} rounds; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    print(f"{'command':<26}{'wall p50':>10}{'over':>22}{'p50':>8}{'best':>8}{'worst':>8}   ms")
    for name, _ in steps:
        what = "" if name == "python" else "python + swtpm" if name in SIM_NAMES else "python"
        xs = over[name]
        if name in ("python", "swtpm"):  # the floors
            print(f"{name:<26}{statistics.median(raw[name]) * ms:>10.1f}")
            continue
        print(f"{name:<26}{statistics.median(raw[name]) * ms:>10.1f}{what:>22}{statistics.median(xs) * ms:>+8.1f}"
              f"{min(xs) * ms:>+8.1f}{max(xs) * ms:>+8.1f}")
    v, h = (statistics.median(over[n]) * ms for n in ("--version", "--help"))
    sims = max(statistics.median(over[n]) * ms for n in SIM)
    print(f"info/handles --sim over python + swtpm's own start-up: +{sims:.0f} ms (target ≤ +150 ms)")
    print(f"startup: --version {v:+.0f} ms, --help {h:+.0f} ms over python")
    return 0 if v <= 40 and h <= 80 and sims <= 150 else 1


if __name__ == "__main__":
    raise SystemExit(main())
