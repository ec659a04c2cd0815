"""pcapng at scale: a 1,000,000-event capture with every command's bytes, exported as pcapng
and imported back, beside chrome-trace's export of the same capture in the same run — for two
captures: the generated one, and one shaped like bench's (a real `tpmtop bench --events`
capture's events, with their real command and response bytes, repeated to the same count,
which is what users export); then
`compare` of the imported capture beside `compare` of a bench-shaped capture of as many
events (CPU seconds). Not a test: prints figures, the machine and its load.

    .venv/bin/python benchmarks/pcapng_scale.py [--events 1000000] [--dir /tmp] [--keep] [--skip-import]

Targets (issue 40): pcapng export and import each ≤ 200 MB peak RSS and ≤ 2× chrome-trace's
wall time; compare of the imported capture ≤ 1.5× the CPU of the bench capture's. Each
command is a separate `python -m tpmtop` process; wall time is process start to exit, peak RSS
and CPU are wait4's (ru_maxrss, ru_utime + ru_stime).
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

from machine import describe, measured  # noqa: E402


def _msg(tag: int, size: int, code: int) -> str:
    """A TPM message of ``size`` bytes: its header (tag, size, command or response code), zeros."""
    return (struct.pack(">HII", tag, size, code) + bytes(size - 10)).hex()


# Each command and response with the sizes bench sees on swtpm (values do not matter, sizes and
# headers do: the import cuts the streams by the headers' sizes).
BYTES = {
    "TPM2_CC_PCR_Extend": (_msg(0x8002, 65, 0x182), _msg(0x8002, 19, 0)),
    "TPM2_CC_ContextLoad": (_msg(0x8001, 184, 0x161), _msg(0x8001, 14, 0)),
    "TPM2_CC_StartAuthSession": (_msg(0x8001, 59, 0x176), _msg(0x8001, 48, 0)),
    "TPM2_CC_FlushContext": (_msg(0x8001, 14, 0x165), _msg(0x8001, 10, 0)),
    "TPM2_CC_ContextSave": (_msg(0x8001, 14, 0x162), _msg(0x8001, 188, 0)),
}


def generate(path: str, n: int, with_bytes: bool) -> None:
    """The synthetic capture of benchmarks/export.py, with (or without) every event's bytes and
    the wall clock of t_ns = 0 (what a capture with bytes carries)."""
    import export as base  # benchmarks/export.py

    from tpmtop.capture import write_capture

    real_write = base.write_capture

    def with_hex(p: str, cap: dict) -> None:
        events = cap["events"]
        if with_bytes:
            cap["t0_unix_ns"] = 1_762_077_600_000_000_000

            def add(evs):
                for e in evs:
                    c, r = BYTES[e["command"]]
                    e["command_hex"], e["response_hex"] = c, r
                    yield e

            cap["events"] = add(events)
        write_capture(p, cap)

    base.write_capture = with_hex
    try:
        base.synthetic_capture(path, n)
    finally:
        base.write_capture = real_write


def bench_shaped(path: str, n: int, seed_capture: str) -> None:
    """A capture shaped like bench's: the events of a real ``tpmtop bench --events`` capture
    (``seed_capture``: every command's and response's bytes as bench records them, its labels,
    handles and sessions), repeated until ``n`` events, each repeat shifted in time past the
    last and its operation numbers past the last's."""
    import json

    from tpmtop.capture import write_capture

    with open(seed_capture, encoding="utf-8") as f:
        seed = json.load(f)
    evs, ops = seed["events"], seed.get("ops") or []
    span = max(e["t_ns"] + e["wire_ns"] for e in evs) + 1_000_000
    for o in ops:
        span = max(span, o["t_ns"] + o["total_ns"] + 1_000_000)
    seqs = max([o["op_seq"] for o in ops] + [e["op_seq"] or 0 for e in evs]) + 1
    repeats = -(-n // len(evs))

    def events():
        made = 0
        for k in range(repeats):
            for e in evs:
                if made == n:
                    return
                made += 1
                yield {**e, "t_ns": e["t_ns"] + k * span,
                       "op_seq": None if e["op_seq"] is None else e["op_seq"] + k * seqs}

    def operations():
        for k in range(repeats):
            for o in ops:
                yield {**o, "t_ns": o["t_ns"] + k * span, "op_seq": o["op_seq"] + k * seqs}

    cap = {k: v for k, v in seed.items() if k not in ("events", "ops")}
    cap["ops"], cap["events"] = operations(), events()
    write_capture(path, cap)


def make_seed(d: str) -> str:
    """A real bench capture with every command's bytes: all four modes, native engine."""
    path = os.path.join(d, "seed.json")
    subprocess.run([sys.executable, "-m", "tpmtop", "bench", "--sim", "--engine", "native", "-n", "500",
                    "--events", "--json", path, "-q"], check=True, stdout=subprocess.DEVNULL)
    return path


def run(argv: list[str]) -> tuple[float, float, float]:
    """(wall s, peak RSS MB, CPU s) of one tpmtop process."""
    m = measured([sys.executable, "-m", "tpmtop", *argv])
    if m.code != 0:
        raise SystemExit(f"tpmtop {' '.join(argv)} failed ({m.code}): {m.stderr}")
    return m.wall_s, m.rss_mb, m.cpu_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--skip-import", action="store_true", help="export only (the import's figures left out)")
    ap.add_argument("--generate", nargs=2, metavar=("PATH", "BYTES"), help=argparse.SUPPRESS)
    ap.add_argument("--shaped", nargs=2, metavar=("PATH", "SEED"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.generate:
        generate(args.generate[0], args.events, args.generate[1] == "1")
        return 0
    if args.shaped:
        bench_shaped(args.shaped[0], args.events, args.shaped[1])
        return 0
    d = args.dir or tempfile.mkdtemp(prefix="tpmtop-bench-pcapng-")
    cap, plain = os.path.join(d, "bytes.json"), os.path.join(d, "plain.json")
    shaped = os.path.join(d, "bench-shaped.json")
    # generated in child processes: a child's ru_maxrss includes what its parent had resident
    for path, b in ((cap, "1"), (plain, "0")):
        subprocess.run([sys.executable, os.path.abspath(__file__), "--events", str(args.events),
                        "--generate", path, b], check=True)
    subprocess.run([sys.executable, os.path.abspath(__file__), "--events", str(args.events),
                    "--shaped", shaped, make_seed(d)], check=True)
    print(f"machine: {describe()}")
    print(f"load average at start: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    for label, path in (("generated", cap), ("bench-shaped (a real bench --events capture's events, repeated)",
                                             shaped)):
        print(f"\ncapture, {label}: {args.events:,} events with bytes, {os.path.getsize(path) / 1e6:.0f} MB")
        chrome = run(["export", path, "--format", "chrome-trace", "-o", os.path.join(d, "trace.json")])
        pcap = os.path.join(d, "out.pcapng")
        w, rss, cpu = run(["export", path, "--format", "pcapng", "-o", pcap])
        # CPU time beside wall time: on a shared machine the wall time of one export moved ×2
        # between two runs at the same load average; a ratio of CPU times moves less
        print(f"export chrome-trace: {chrome[0]:6.1f} s ({chrome[2]:5.1f} s CPU), peak RSS {chrome[1]:5.0f} MB, "
              f"{os.path.getsize(os.path.join(d, 'trace.json')) / 1e6:.0f} MB")
        print(f"export pcapng:       {w:6.1f} s ({cpu:5.1f} s CPU), peak RSS {rss:5.0f} MB, "
              f"{os.path.getsize(pcap) / 1e6:.0f} MB, x{w / chrome[0]:.2f} chrome-trace's time "
              f"(x{cpu / chrome[2]:.2f} CPU)  (target ≤ 200 MB, ≤ x2)")
        if args.skip_import:
            continue
        imported = os.path.join(d, "imported.json")
        w, rss, cpu = run(["import", pcap, "-o", imported])
        print(f"import pcapng:       {w:6.1f} s ({cpu:5.1f} s CPU), peak RSS {rss:5.0f} MB, "
              f"x{w / chrome[0]:.2f} chrome-trace's time (x{cpu / chrome[2]:.2f} CPU)  (target ≤ 200 MB, ≤ x2)")
        if path == cap:
            _, _, cpu_bench = run(["compare", plain, plain])
            _, _, cpu_imp = run(["compare", imported, imported])
            print(f"compare, bench-shaped capture: {cpu_bench:6.1f} s CPU; imported capture: {cpu_imp:6.1f} s CPU, "
                  f"x{cpu_imp / cpu_bench:.2f}  (target ≤ x1.5)")
    print(f"load average at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    if not args.keep:
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        if args.dir is None:
            os.rmdir(d)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
