"""Event-log replay benchmark: a synthetic 50,000-event crypto-agile firmware log (four banks)
and a 50,000-entry IMA list (binary, ima-ng) through `tpmtop pcrs` (target: under 2 s and under
100 MB peak RSS on this machine, issue 41).

    .venv/bin/python benchmarks/pcrs_replay.py [--events 50000] [--ima 50000] [--dir /tmp] [--keep]

The firmware events are shaped as OVMF's (tests/fixtures/pcrs/ovmf): EFI variables with their
GUIDs and names, boot-services applications with device paths, actions and separators, spread
over PCRs 0-9; the IMA entries are ima-ng records of file paths. Runs `python -m tpmtop pcrs`
as a separate process twice: with --no-tpm (the replay alone) and with --sim (a private swtpm
read with PCR_Read, so every PCR is compared and IMA's prefixes and padded SHA-1 chains are
searched — the most work a run does), and reports each one's wall time (process start to exit,
the swtpm's start included) and peak RSS (wait4's ru_maxrss). Exit status 1 if a target is missed.

Then, in the same run, `tpmtop pcrs --no-tpm --events` (every event decoded and printed, the
output to /dev/null) against `tpm2_eventlog` (tpm2-tools) on the same log, alternated three
times each, with the medians' ratios (issue 51's goal: within x1.5 in time and in memory). The
sim run exits 1 (a fresh swtpm holds none of the log's values: the replay does not match):
that is the report, not a failure; only another status is.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from machine import describe, measured

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_S = 2.0
TARGET_MB = 100
TARGET_RATIO = 1.5  # --events against tpm2_eventlog, time and memory
ROUNDS = 3
BANKS = ((0x0004, 20, "sha1"), (0x000B, 32, "sha256"), (0x000C, 48, "sha384"), (0x000D, 64, "sha512"))
GLOBAL = bytes.fromhex("61dfe48bca93d211aa0d00e098032b8c")  # EFI global variable GUID, little-endian


def _spec_id() -> bytes:
    body = b"Spec ID Event03\0" + struct.pack("<IBBBBI", 0, 0, 2, 0, 2, len(BANKS))
    body += b"".join(struct.pack("<HH", alg, size) for alg, size, _ in BANKS) + b"\0"
    return struct.pack("<II", 0, 3) + bytes(20) + struct.pack("<I", len(body)) + body


def _event(pcr: int, etype: int, data: bytes) -> bytes:
    digests = b"".join(struct.pack("<H", alg) + hashlib.new(name, data).digest() for alg, _, name in BANKS)
    return struct.pack("<III", pcr, etype, len(BANKS)) + digests + struct.pack("<I", len(data)) + data


def _variable(name: str, value: bytes) -> bytes:
    n = name.encode("utf-16-le")
    return GLOBAL + struct.pack("<QQ", len(name), len(value)) + n + value


def _image(path: str) -> bytes:
    node = path.encode("utf-16-le") + b"\0\0"
    dp = struct.pack("<BBH", 4, 4, 4 + len(node)) + node + struct.pack("<BBH", 0x7F, 0xFF, 4)
    return struct.pack("<QQQQ", 0x5D3DE018, 8_000_000, 0, len(dp)) + dp


def write_log(path: str, n: int, rng: random.Random) -> None:
    with open(path, "wb") as f:
        f.write(_spec_id())
        for i in range(n - 1):
            k = i % 4
            if k == 0:
                f.write(_event(7, 0x80000001, _variable(f"Var{i:06d}", rng.randbytes(8))))
            elif k == 1:
                f.write(_event(4, 0x80000003, _image(f"\\EFI\\BOOT\\app{i:06d}.efi")))
            elif k == 2:
                f.write(_event(rng.randrange(10), 0x80000007, b"Calling EFI Application from Boot Option"))
            else:
                f.write(_event(rng.randrange(8), 0x4, b"\0\0\0\0"))


def write_ima(path: str, n: int, rng: random.Random) -> None:
    with open(path, "wb") as f:
        for i in range(n):
            filedata = b"sha256:\0" + rng.randbytes(32)
            name = f"/usr/lib/file{i:06d}.so".encode() + b"\0"
            tdata = struct.pack("<I", len(filedata)) + filedata + struct.pack("<I", len(name)) + name
            sha1 = hashlib.sha1(tdata).digest()
            f.write(struct.pack("<I", 10) + sha1 + struct.pack("<I", 6) + b"ima-ng" + struct.pack("<I", len(tdata))
                    + tdata)


def run(args: list[str], json: bool = True) -> tuple[float, float, float, int, str]:
    m = measured([sys.executable, "-m", "tpmtop", "pcrs", *args, *(["--json"] if json else [])], cwd=ROOT)
    return m.wall_s, m.cpu_s, m.rss_mb, m.code, m.stderr


def against_tpm2_eventlog(log: str) -> bool:
    """``--events`` (text, to /dev/null) and tpm2_eventlog on ``log``, alternated: medians of
    wall time, CPU time and peak RSS, and tpmtop's ratio to tpm2_eventlog for each."""
    import shutil
    import statistics

    tool = shutil.which("tpm2_eventlog")
    if tool is None:
        print("tpm2_eventlog is not installed: no comparison (scripts/bootstrap.sh --test installs tpm2-tools)")
        return True
    ours, theirs = [], []
    for _ in range(ROUNDS):
        ours.append(measured([sys.executable, "-m", "tpmtop", "pcrs", "--no-tpm", "--eventlog", log, "--events"],
                             cwd=ROOT))
        theirs.append(measured([tool, log], cwd=ROOT))
    bad = [m for m in ours + theirs if m.code != 0]
    if bad:
        print(f"a run failed (exit {bad[0].code}): {bad[0].stderr[-300:]}")
        return False
    med = {name: {k: statistics.median(getattr(m, k) for m in runs) for k in ("wall_s", "cpu_s", "rss_mb")}
           for name, runs in (("tpmtop", ours), ("tpm2_eventlog", theirs))}
    ok = True
    for k, unit in (("wall_s", "s wall"), ("cpu_s", "s CPU"), ("rss_mb", "MB peak RSS")):
        a, b = med["tpmtop"][k], med["tpm2_eventlog"][k]
        ratio = a / b if b else float("inf")
        hit = ratio <= TARGET_RATIO
        ok = ok and (hit or k == "wall_s")  # wall time on a shared machine is reported, judged by CPU
        print(f"--events vs tpm2_eventlog, median of {ROUNDS}: {a:.2f} vs {b:.2f} {unit} = x{ratio:.2f} "
              f"(goal x{TARGET_RATIO}: {'ok' if hit else 'MISSED'})")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=50_000, help="firmware log events (default 50000)")
    ap.add_argument("--ima", type=int, default=50_000, help="IMA entries (default 50000)")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    a = ap.parse_args()
    log = os.path.join(a.dir, f"tpmtop-bench-eventlog-{os.getpid()}.bin")
    ima = os.path.join(a.dir, f"tpmtop-bench-ima-{os.getpid()}.bin")
    print(f"machine: {describe()}")
    rng = random.Random(41)
    ok = True
    try:
        write_log(log, a.events, rng)
        write_ima(ima, a.ima, rng)
        print(f"event log: {a.events:,} events, {os.path.getsize(log) / 1e6:.1f} MB; "
              f"IMA list: {a.ima:,} entries, {os.path.getsize(ima) / 1e6:.1f} MB")
        for label, extra in (("replay only (--no-tpm)", ["--no-tpm"]), ("against a private swtpm (--sim)", ["--sim"])):
            wall, cpu, rss, rc, err = run(["--eventlog", log, "--ima", ima, *extra])
            if rc not in (0, 1):  # 1: the replay does not match the fresh swtpm, the report says so
                print(f"tpmtop pcrs failed (exit {rc}): {err}")
                return 1
            ok_t, ok_m = wall < TARGET_S, rss < TARGET_MB
            ok = ok and ok_t and ok_m
            print(f"tpmtop pcrs, {label}: {wall:.2f} s (target < {TARGET_S:.0f} s: {'ok' if ok_t else 'MISSED'}; "
                  f"CPU {cpu:.2f} s), peak RSS {rss:.0f} MB (target < {TARGET_MB} MB: {'ok' if ok_m else 'MISSED'})")
        print(f"load average: {os.getloadavg()[0]:.1f} (1 min)")
        ok = against_tpm2_eventlog(log) and ok
        print(f"load average: {os.getloadavg()[0]:.1f} (1 min)")
        return 0 if ok else 1
    finally:
        for p in (log, ima):
            if a.keep:
                print(f"kept {p}")
            elif os.path.exists(p):
                os.unlink(p)


if __name__ == "__main__":
    sys.exit(main())
