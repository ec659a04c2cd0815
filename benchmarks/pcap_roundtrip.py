"""pcapng export, import and full decode on a real bench capture: how long each takes.

Records `tpmtop bench --sim --events` (native engine, none + per-command modes, N operations
each), then times, each as a fresh `python -m tpmtop` process (start-up included, as a user
sees it): `export --format pcapng`, `import` of that file, and in-process `decode` of every
command/response pair. Prints the figures and the machine; not a test.

    .venv/bin/python benchmarks/pcap_roundtrip.py [-n 2000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe

TPMTOP = [sys.executable, "-m", "tpmtop"]


def timed(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(TPMTOP + argv, check=True, capture_output=True, timeout=3600)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2000, help="operations per mode (default 2000)")
    args = ap.parse_args()
    from tpmtop import decode
    from tpmtop.capture import load_capture

    with tempfile.TemporaryDirectory() as d:
        cap = Path(d) / "bench.json"
        subprocess.run(TPMTOP + ["bench", "--sim", "--op", "extend", "--modes", "none,per-command", "--engine",
                                 "native", "-n", str(args.n), "--events", "--json", str(cap), "-q"],
                       check=True, capture_output=True, timeout=3600)
        events = load_capture(cap)["events"]
        with_bytes = [e for e in events if "command_hex" in e]
        pcap = Path(d) / "bench.pcapng"
        t_export = timed(["export", str(cap), "--format", "pcapng", "-o", str(pcap)])
        t_import = timed(["import", str(pcap), "-o", str(Path(d) / "back.json")])
        pairs = [(bytes.fromhex(e["command_hex"]), bytes.fromhex(e["response_hex"])) for e in with_bytes]
        t = time.perf_counter()
        complete = sum(decode.decode(c, r).complete for c, r in pairs)
        t_decode = time.perf_counter() - t
        print(f"machine: {describe()}")
        print(f"capture: {len(events)} events, {len(with_bytes)} with bytes, {cap.stat().st_size / 1e6:.1f} MB; "
              f"pcapng {pcap.stat().st_size / 1e6:.1f} MB")
        print(f"export --format pcapng: {t_export:.2f} s (process, start-up included)")
        print(f"import:                 {t_import:.2f} s (process, start-up included)")
        print(f"decode every pair:      {t_decode / len(pairs) * 1e6:.0f} µs per pair in-process "
              f"({complete}/{len(pairs)} complete)")


if __name__ == "__main__":
    main()
