#!/usr/bin/env python3
"""Does the dashboard's own refresh show up in the latencies it shows? (not part of the tests)

    .venv/bin/python benchmarks/refresh_tail.py [--seconds 20] [--rounds 2] [--refresh 0.2]

The dashboard's workload (per-command ``extend`` on PCR 16, the native engine, the default
pacing: bursts of 10 operations every 0.1 s) runs on a private swtpm in windows of
``--seconds``, alternately:

- **alone**: the live source's workload loop on its own thread, no app;
- **dashboard**: the real app (headless Textual driver, 120×40) around the same source,
  refreshing every ``--refresh`` s (the default 0.2 s), the handles polled, the statistics
  computed, as ``make run`` shows them.

Each window starts on a fresh private swtpm, runs 2 s before its statistics are reset, and
reports the per-command operation time (op) and the time on the wire (the TPM's round trips)
at p50 and p99, as the Latency panel reads them. Windows alternate so that neither gets the
quieter moments of a shared machine.

The last line is the verdict, the worst window of each kind:
``refresh tail: op p99 dashboard/alone x<R> (<a> / <b> µs), wire p99 x<W>``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from machine import describe

from tpmtop.connect import open_tpm
from tpmtop.sessions.modes import Mode
from tpmtop.sources.live import DEFAULT_RATE, LiveSource

WARM_S = 2.0


def _figures(src: LiveSource) -> tuple[int, float, float, float, float]:
    for (_engine, mode, _op), acc in src.accounts().items():
        if mode == Mode.PER_COMMAND:
            return (acc.ops, acc.op_hist.percentile_ns(50) / 1e3, acc.op_hist.percentile_ns(99) / 1e3,
                    acc.wire_hist.percentile_ns(50) / 1e3, acc.wire_hist.percentile_ns(99) / 1e3)
    raise SystemExit("no per-command operations ran")


async def _window(src: LiveSource, pause, seconds: float) -> tuple:
    """Warm up, reset the statistics, measure for ``seconds``; ``pause`` waits the way the
    window's owner does (the app's pilot, or asyncio)."""
    await pause(WARM_S)
    src.reset_stats()
    await pause(seconds)
    return _figures(src)


async def _alone(seconds: float) -> tuple:
    src = LiveSource(open_tpm(sim=True), start_running=True, rate=DEFAULT_RATE, mode=Mode.PER_COMMAND)
    stop = threading.Event()
    t = threading.Thread(target=src.workload_loop, args=(stop.is_set,), daemon=True)
    t.start()
    try:
        return await _window(src, asyncio.sleep, seconds)
    finally:
        stop.set()
        t.join(10)
        src.close()


async def _dashboard(seconds: float, refresh: float) -> tuple:
    from tpmtop.tui.app import TpmtopApp

    src = LiveSource(open_tpm(sim=True), start_running=True, rate=DEFAULT_RATE, mode=Mode.PER_COMMAND)
    try:
        app = TpmtopApp(src, theme="dark", remember=False, refresh_s=refresh)
        async with app.run_test(size=(120, 40)) as pilot:
            return await _window(src, pilot.pause, seconds)
    finally:
        src.close()


def _line(kind: str, f: tuple) -> str:
    ops, op50, op99, w50, w99 = f
    return (f"  {kind:<9} {ops:>6,} ops  op p50 {op50:>7,.0f}  p99 {op99:>7,.0f} µs   "
            f"wire p50 {w50:>7,.0f}  p99 {w99:>7,.0f} µs")


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each window")
    ap.add_argument("--rounds", type=int, default=2, help="alone/dashboard pairs (ABBA order)")
    ap.add_argument("--refresh", type=float, default=0.2, help="the dashboard's refresh interval, s")
    a = ap.parse_args()
    print(describe())
    print(f"load average {os.getloadavg()[0]:.2f}; per-command extend, native, {DEFAULT_RATE:g} ops/s in bursts; "
          f"windows of {a.seconds:g} s, refresh {a.refresh:g} s")
    got: dict[str, list[tuple]] = {"alone": [], "dashboard": []}
    for r in range(a.rounds):
        order = ("alone", "dashboard") if r % 2 == 0 else ("dashboard", "alone")
        for kind in order:
            f = await (_alone(a.seconds) if kind == "alone" else _dashboard(a.seconds, a.refresh))
            got[kind].append(f)
            print(_line(kind, f), flush=True)
    alone, dash = (max(got[k], key=lambda f: f[2]) for k in ("alone", "dashboard"))
    wire_alone, wire_dash = (max(f[4] for f in got[k]) for k in ("alone", "dashboard"))
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(f"refresh tail: op p99 dashboard/alone x{dash[2] / alone[2]:.2f} ({dash[2]:,.0f} / {alone[2]:,.0f} µs), "
          f"wire p99 x{wire_dash / wire_alone:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
