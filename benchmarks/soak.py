"""Soak: the fastest workload for a long time, on a private swtpm (issue 8).

Runs the native engine as fast as it goes, switching session mode and operation every
``--switch`` seconds (default 3) through every mode x op, for ``--seconds`` (default 600).
Then reports operations done, errors, handles leaked (handles the TPM still holds that
tpmtop created: must be 0) and how much the process's RSS grew after the first minute
(target < 5 MB; the recorder's ring buffer of 100,000 events fills well within that minute).

    .venv/bin/python benchmarks/soak.py --seconds 600

Not part of the test suite.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

import psutil

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from machine import describe

from tpmtop.connect import open_tpm
from tpmtop.errors import TpmtopError
from tpmtop.sessions.modes import MODES, OPS
from tpmtop.sessions.workload import Workload
from tpmtop.tpm.handles import list_handles

# Commands whose response carries a handle the TPM now holds for the caller.
CREATING = {0x131: "CreatePrimary", 0x176: "StartAuthSession", 0x161: "ContextLoad", 0x157: "Load",
            0x167: "LoadExternal"}
MB = 1024 * 1024


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=600.0, help="how long to run (default 600)")
    ap.add_argument("--switch", type=float, default=3.0, help="seconds between mode/op switches (default 3)")
    ap.add_argument("--warm", type=float, default=60.0,
                    help="RSS baseline taken this many seconds in (default 60: after the first minute)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON too")
    args = ap.parse_args(argv)

    proc = psutil.Process()
    conn = open_tpm(sim=True)
    created: set[int] = set()
    backend = conn.transport.backend
    real = backend.transact

    def tap(command: bytes) -> bytes:
        rsp = real(command)
        cc = int.from_bytes(command[6:10], "big")
        if cc in CREATING and len(rsp) >= 14 and rsp[6:10] == b"\0\0\0\0":
            created.add(int.from_bytes(rsp[10:14], "big"))
        return rsp

    backend.transact = tap

    combos = itertools.cycle([(m, o) for m in MODES for o in OPS])
    ops = errors = switches = 0
    first_errors: list[str] = []
    per_combo: dict[str, int] = {}
    rss_start = proc.memory_info().rss
    rss_warm = None
    rss_peak = rss_start
    w = Workload(conn, "native", MODES[0], OPS[0])
    t0 = time.monotonic()
    end = t0 + args.seconds
    try:
        while True:
            now = time.monotonic()
            if now >= end:
                break
            mode, op = next(combos)
            w.set(mode=mode, op=op)
            switches += 1
            until = min(end, now + args.switch)
            key = f"{mode}/{op}"
            n = 0
            while time.monotonic() < until:
                for _ in range(50):
                    try:
                        w.run_one()
                        n += 1
                    except TpmtopError as e:
                        errors += 1
                        if len(first_errors) < 5:
                            first_errors.append(f"{key}: {e}")
            ops += n
            per_combo[key] = per_combo.get(key, 0) + n
            rss = proc.memory_info().rss
            rss_peak = max(rss_peak, rss)
            if rss_warm is None and time.monotonic() - t0 >= args.warm:
                rss_warm = rss
    except KeyboardInterrupt:
        print("interrupted: reporting what ran", file=sys.stderr)
    finally:
        elapsed = time.monotonic() - t0
        w.close()
        still = {e.handle for e in list_handles(conn.transport)}
        backend.transact = real
        rss_end = proc.memory_info().rss
        conn.close()

    leaked = sorted(still & created)
    growth = None if rss_warm is None else (rss_end - rss_warm) / MB
    result = {
        "seconds": round(elapsed, 1), "ops": ops, "ops_per_s": round(ops / elapsed) if elapsed else 0,
        "errors": errors, "first_errors": first_errors, "switches": switches,
        "handles_created": len(created), "handles_leaked": [f"0x{h:08x}" for h in leaked],
        "rss_start_mb": round(rss_start / MB, 1),
        "rss_after_warm_mb": None if rss_warm is None else round(rss_warm / MB, 1),
        "rss_end_mb": round(rss_end / MB, 1), "rss_peak_mb": round(rss_peak / MB, 1),
        "rss_growth_after_warm_mb": None if growth is None else round(growth, 2),
        "machine": describe(),
        "per_mode_op": per_combo,
    }
    print(f"soak: {result['seconds']} s, native engine, mode/op switch every {args.switch:g} s ({switches} switches)")
    print(f"operations: {ops} ({result['ops_per_s']}/s), errors: {errors}")
    for line in first_errors:
        print(f"  error: {line}")
    print(f"handles created: {len(created)} distinct values (swtpm reuses them); "
          f"leaked (still held and created by tpmtop): {len(leaked)}"
          + (f" {result['handles_leaked']}" if leaked else ""))
    if growth is None:
        print(f"RSS: {result['rss_start_mb']} MB at start, {result['rss_end_mb']} MB at end "
              f"(run shorter than --warm {args.warm:g} s: no growth figure)")
    else:
        print(f"RSS: {result['rss_start_mb']} MB at start, {result['rss_after_warm_mb']} MB after {args.warm:g} s, "
              f"{result['rss_end_mb']} MB at end (peak {result['rss_peak_mb']} MB): "
              f"growth after the first minute {growth:+.2f} MB (target < 5 MB)")
    if args.json:
        print(json.dumps(result, indent=1))
    ok = not leaked and (growth is None or growth < 5)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
