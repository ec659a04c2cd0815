#!/usr/bin/env python3
"""The thread's benchmark in the lab: N IMA extends on three real kernels, beside its figures.

    sudo .venv/bin/python benchmarks/lab_ima_extends.py [--files 1000] [--profile slb9670]
    sudo .venv/bin/python benchmarks/lab_ima_extends.py --files 12313 --profile none

The linux-integrity thread extended a PCR with the 12,313 entries of an IMA measurement list:
102.8 s without HMAC, 1,941.71 s with HMAC as 6.10/6.11 do it, 404.4 s with the lazy-flush
patches (6.12). Here each kernel — Debian's 6.12 (HMAC off), the lab's 6.12-percmd (a session
per command, as 6.10/6.11) and 6.12-hmac (the kept session) — boots under qemu with its TPM
served by tpmtop, and the guest's workload makes IMA measure N files as fast as it can (each
file opened once by a shell built-in: one measurement, one PCR extend, nothing in between), so
the kernel sends N extends back to back. Printed: each kernel's TPM seconds for N extends, the
guest's wall seconds, the ratios over HMAC off, the TPM time scaled to 12,313 extends and the
thread's figures beside, with what explains the differences (tpmtop.lab.benchmark).

N so that a run fits minutes: 1,000 with the slb9670 profile (the per-command kernel spends
~150 ms of chip time per extend: ~2.5 min), 12,313 without a profile (swtpm's speed). The
kernels boot without tpmtop's kprobes (--trace to arm them): the benchmark is the kernel's own
pace. Needs root and the lab's kernels (`make lab-kernels`). Exit status as `tpmtop lab`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from machine import describe  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=1000, help="IMA measurements (PCR extends) per boot (default 1000)")
    ap.add_argument("--profile", default="slb9670", help="chip profile, or none (default slb9670)")
    ap.add_argument("--kernels", default="6.12,6.12-percmd,6.12-hmac", help="comma-separated (default: the three)")
    ap.add_argument("--boots", type=int, default=1)
    ap.add_argument("--trace", action="store_true", help="arm tpmtop's kprobes in the guests as well")
    ap.add_argument("--out", help="where the lab's captures and logs go")
    ap.add_argument("--json", help="also write the rows as JSON")
    ap.add_argument("--guest-timeout", type=float, default=1800.0)
    a = ap.parse_args()

    from tpmtop.errors import TpmtopError
    from tpmtop.lab import benchmark
    from tpmtop.lab.run import LabOptions, run_lab

    profile = None if a.profile in ("none", "") else a.profile
    opts = LabOptions(
        kernels=[k for k in a.kernels.split(",") if k],
        profile=profile,
        boots=a.boots,
        files=a.files,
        out_dir=a.out,
        timeout_s=a.guest_timeout,
        bench_n=20,
        trace=a.trace,
    )
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    try:
        res = run_lab(opts, log=lambda s: print(s, file=sys.stderr))
    except TpmtopError as e:
        print(f"lab_ima_extends: {e}", file=sys.stderr)
        return 1
    print(f"# lab_ima_extends: {started}, {describe()}; load {load} at start; qemu {res.accel.upper()}")
    print(f"# {a.files:,} files per boot, kernels {','.join(opts.kernels)}, captures in {res.out_dir}")
    for b in res.boots:
        print(
            f"#   {b.kernel} #{b.index}: {b.release}, {'ok' if b.ok else 'FAILED: ' + '; '.join(b.problems)}, "
            f"mode {b.mode}, IMA {b.ima_workload} measurements, {b.workload_extends} workload extends"
        )
    print("\n".join(benchmark.table(res.boots, profile)))
    if a.json:
        rows = {m: r.to_json() for m, r in benchmark.rows(res.boots).items()}
        with open(a.json, "w") as f:
            json.dump({"started": started, "machine": describe(), "load": load, "options": opts.__dict__,
                       "rows": rows, "out": res.out_dir}, f, indent=1, default=str)
    return 0 if res.boots and all(b.ok for b in res.boots) else 1


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("lab_ima_extends: needs root (tpmtop lab boots kernels under qemu)", file=sys.stderr)
        sys.exit(2)
    sys.exit(main())
