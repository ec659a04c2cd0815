"""Memory and time of every command that reads a big capture (target: ≤ 200 MB peak RSS).

    .venv/bin/python benchmarks/capture_rss.py [--events 1000000] [--dir /tmp] [--keep]

Writes the synthetic capture of benchmarks/export.py (the shape `tpmtop bench --json
--events` writes; 1M events is ~250 MB), then runs each reader as a separate process — the
way a user runs it — and reports its wall time (start to exit) and peak RSS (wait4's
ru_maxrss): `profile from-capture`, `boot --capture`, `compare`, `export --format
openmetrics`, and the replay loader (`tpmtop.sources.replay.load`, what `tpmtop replay` reads
before drawing). Its last line: `capture rss: worst <name> <MB> MB (target ≤ 200 MB)`.
Exit status 1 if a command fails or misses the target.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from machine import describe, measured  # noqa: E402 - benchmarks/machine.py

TARGET_MB = 200
BOOT_ROOT = os.path.join(HERE, "..", "tests", "fixtures", "boot", "laptop-6.10-hmac")


def measure(argv: list[str]) -> tuple[float, float, str]:
    m = measured(argv)
    if m.code != 0:
        raise SystemExit(f"{' '.join(argv[2:5])} failed ({m.code}): {m.stderr}")
    return m.wall_s, m.rss_mb, m.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--dir", default=None, help="where to put the files (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the capture")
    args = ap.parse_args()
    d = args.dir or tempfile.mkdtemp(prefix="tpmtop-bench-rss-")
    cap = os.path.join(d, "capture.json")
    t = time.perf_counter()
    # Generated in a child process (benchmarks/export.py), so this process stays small: a
    # child's ru_maxrss includes what its forked parent had resident before exec.
    subprocess.run([sys.executable, os.path.join(HERE, "export.py"), "--events", str(args.events),
                    "--generate-only", cap], check=True, capture_output=True)
    print(f"machine: {describe()}")
    print(f"capture: {args.events:,} events, {os.path.getsize(cap) / 1e6:.0f} MB "
          f"(written in {time.perf_counter() - t:.1f} s)")
    py = [sys.executable, "-m", "tpmtop"]
    runs = {
        "profile from-capture": py + ["profile", "from-capture", cap, "-o", os.path.join(d, "p.json"), "--force"],
        "boot --capture": py + ["boot", "--root", BOOT_ROOT, "--capture", cap],
        "compare": py + ["compare", cap, cap],
        "export openmetrics": py + ["export", cap, "-f", "openmetrics", "-o", os.path.join(d, "o.prom")],
        "replay (loader)": [sys.executable, "-c", "import sys; from tpmtop.sources.replay import "
                            "ReplaySource, load; ReplaySource(load(sys.argv[1]), sys.argv[1])", cap],
    }
    worst = ("", 0.0)
    ok = True
    try:
        for name, argv in runs.items():
            wall, rss, _ = measure(argv)
            hit = rss <= TARGET_MB
            ok &= hit
            worst = max(worst, (name, rss), key=lambda w: w[1])
            print(f"{name:22s}: {wall:6.2f} s, peak RSS {rss:5.0f} MB  {'ok' if hit else 'MISSED'}")
    finally:
        if not args.keep:
            for f in ("capture.json", "p.json", "o.prom"):
                try:
                    os.unlink(os.path.join(d, f))
                except FileNotFoundError:
                    pass
            if args.dir is None:
                os.rmdir(d)
    print(f"capture rss: worst {worst[0]} {worst[1]:.0f} MB (target ≤ {TARGET_MB} MB)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
