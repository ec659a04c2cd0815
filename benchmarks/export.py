"""Export benchmark: a 1,000,000-event capture through `tpmtop export` (target ≤ 5 s, ≤ 500 MB).

    .venv/bin/python benchmarks/export.py [--events 1000000] [--dir /tmp] [--keep]

Writes a synthetic capture (the shape `tpmtop bench --json --events` writes: ops then events,
one per line; the mix of session modes makes 1–4 commands per operation) with tpmtop's own
writer, then runs each export as a separate `python -m tpmtop export` process and reports
its wall time (process start to exit, imports and fsync included) and peak RSS (wait4's
ru_maxrss). Exit status 1 if a target is missed.

``--split-knob``: instead, the chrome-trace export with the ``export_split`` knob on and off
(``--set export_split=…``, alternating, ``--repeat`` times each), idle and under ``--load``
busy loops of its own, in one run; prints each median and the on/off ratio.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from machine import describe, measured

from tpmtop.capture import write_capture
from tpmtop.stats import LatencyHistogram

TARGET_S = 5.0
TARGET_MB = 500

# (mode, commands per op: (name, median wire ns, handles, sessions)) roughly as on a swtpm
MODES = {
    "none": [("TPM2_CC_PCR_Extend", 120_000, ["0x00000010"], [{"handle": "0x40000009", "attrs": 1}])],
    "per-command": [("TPM2_CC_ContextLoad", 150_000, [], []),
                    ("TPM2_CC_StartAuthSession", 900_000, ["0x80000000", "0x40000007"], []),
                    ("TPM2_CC_FlushContext", 60_000, [], []),
                    ("TPM2_CC_PCR_Extend", 390_000, ["0x00000010"], [{"handle": "0x02000000", "attrs": 0}])],
    "reuse": [("TPM2_CC_PCR_Extend", 390_000, ["0x00000010"], [{"handle": "0x02000001", "attrs": 1}])],
    "saved": [("TPM2_CC_ContextLoad", 150_000, [], []),
              ("TPM2_CC_PCR_Extend", 390_000, ["0x00000010"], [{"handle": "0x02000002", "attrs": 1}]),
              ("TPM2_CC_ContextSave", 80_000, ["0x02000002"], [])],
}


def synthetic_capture(path: str, n_events: int, seed: int = 1) -> dict:
    rng = random.Random(seed)
    hists: dict = {}
    ops: list[tuple] = []
    events: list[tuple] = []  # compact tuples; turned into dicts lazily by the generators
    t = 0
    seq = 0
    modes = list(MODES)
    while len(events) < n_events:
        mode = modes[seq % len(modes)]
        seq += 1
        t0 = t
        wire = 0
        for name, med, hs, ss in MODES[mode]:
            w = int(med * rng.lognormvariate(0, 0.2))
            t += 15_000
            rc = 0 if rng.random() > 1e-4 else 0x98e  # the odd TPM_RC_AUTH_FAIL
            events.append((t, name, hs, ss, rc, w, mode, seq))
            hists.setdefault((mode, "cmd", name), LatencyHistogram()).record(w)
            t += w
            wire += w
        host = int((3_500_000 if mode != "none" else 30_000) * rng.lognormvariate(0, 0.1))
        t += host
        ops.append((seq, mode, t0, t - t0, wire))
        for part, v in (("op", t - t0), ("wire", wire), ("host", t - t0 - wire)):
            hists.setdefault((mode, part, None), LatencyHistogram()).record(v)
        t += 20_000

    def S(h: LatencyHistogram) -> dict:
        return {**h.summary(), "histogram": h.buckets()}

    runs = []
    for mode, cmds in MODES.items():
        n_ops = sum(1 for o in ops if o[1] == mode)
        runs.append({"engine": "native", "mode": mode, "op": "extend", "ops": n_ops,
                     "op_us": S(hists[(mode, "op", None)]), "wire_us": S(hists[(mode, "wire", None)]),
                     "host_us": S(hists[(mode, "host", None)]),
                     "commands_per_op": {c[0]: 1.0 for c in cmds},
                     "commands": {c[0]: S(hists[(mode, "cmd", c[0])]) for c in cmds}})
    rc_words = {0: "success", 0x98e: "tpm:session(1):the authorization HMAC check failed and DA counter incremented"}
    cap = {
        "schema": "tpmtop.capture/1", "created": "2025-11-02T10:00:00+00:00", "tool": {"version": "bench"},
        "host": {"hostname": "bench", "kernel": platform.release()},
        "tpm": {"tcti": "swtpm", "manufacturer": "IBM", "vendor": "SW   TPM", "firmware": "8217.4131",
                "simulated": True},
        "runs": runs,
        "ops": ({"op_seq": s, "engine": "native", "mode": m, "op": "extend", "t_ns": t0, "total_ns": tot,
                 "wire_ns": w, "ok": True} for s, m, t0, tot, w in ops),
        "events": ({"t_ns": t, "command": name, "handles": hs, "sessions": ss, "rc": rc, "rc_text": rc_words[rc],
                    "wire_ns": w, "origin": "workload", "engine": "native", "mode": mode, "op": "extend",
                    "op_seq": s} for t, name, hs, ss, rc, w, mode, s in events),
    }
    write_capture(path, cap)
    return {"events": len(events), "ops": len(ops)}


def run_export(capture: str, fmt: str, out: str, *more: str) -> tuple[float, float, int]:
    m = measured([sys.executable, "-m", "tpmtop", *more, "export", capture, "--format", fmt, "-o", out],
                 stdout=None)
    if m.code != 0:
        raise SystemExit(f"export failed ({m.code}): {m.stderr}")
    return m.wall_s, m.rss_mb, os.path.getsize(out)


def split_knob(cap: str, out: str, repeat: int, load: int) -> None:
    import statistics

    for cond in ("idle", f"{load} busy loops"):
        n = load if cond != "idle" else 0
        loops = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]
        try:
            walls: dict[str, list[float]] = {"on": [], "off": []}
            for i in range(repeat):
                for v in (("on", "off") if i % 2 == 0 else ("off", "on")):
                    walls[v].append(run_export(cap, "chrome-trace", out, "--set", f"export_split={v}")[0])
            load_avg = " ".join(f"{x:.2f}" for x in os.getloadavg())
        finally:
            for p in loops:
                p.kill()
                p.wait()
        on, off = statistics.median(walls["on"]), statistics.median(walls["off"])
        print(f"{cond:14s} (load {load_avg}): export_split on {on:5.2f} s, off {off:5.2f} s, on/off ×{on / off:.2f} "
              f"(median of {repeat} each, alternating)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--dir", default=None, help="where to put the files (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the capture and the outputs")
    ap.add_argument("--repeat", type=int, default=1, help="runs per format")
    ap.add_argument("--generate-only", metavar="PATH", help=argparse.SUPPRESS)
    ap.add_argument("--split-knob", action="store_true", help="the export_split knob on and off, idle and loaded")
    ap.add_argument("--load", type=int, default=2, help="busy loops for --split-knob's loaded condition")
    args = ap.parse_args()
    if args.generate_only:
        n = synthetic_capture(args.generate_only, args.events)
        print(n["events"], n["ops"])
        return 0
    d = args.dir or tempfile.mkdtemp(prefix="tpmtop-bench-export-")
    cap = os.path.join(d, "capture.json")
    t = time.perf_counter()
    # Generated in a child process: an export's peak RSS (wait4's ru_maxrss) includes what its
    # forked parent had resident before exec, so this process must stay small.
    gen = subprocess.run([sys.executable, os.path.abspath(__file__), "--events", str(args.events),
                          "--generate-only", cap], check=True, capture_output=True, text=True)
    ev, ops = gen.stdout.split()
    n = {"events": int(ev), "ops": int(ops)}
    print(f"machine: {describe()}")
    print(f"capture: {n['events']:,} events, {n['ops']:,} ops, {os.path.getsize(cap) / 1e6:.0f} MB "
          f"(written in {time.perf_counter() - t:.1f} s)")
    ok = True
    try:
        if args.split_knob:
            split_knob(cap, os.path.join(d, "trace.json"), args.repeat, args.load)
            return 0
        for fmt, out in (("chrome-trace", "trace.json"), ("openmetrics", "tpmtop.prom")):
            for _ in range(args.repeat):
                wall, rss, size = run_export(cap, fmt, os.path.join(d, out))
                hit = wall <= TARGET_S and rss <= TARGET_MB
                ok &= hit
                print(f"export {fmt:12s}: {wall:5.2f} s, peak RSS {rss:4.0f} MB, output {size / 1e6:6.1f} MB"
                      f"  {'ok' if hit else 'MISSED'} (target ≤ {TARGET_S:.0f} s, ≤ {TARGET_MB} MB)")
    finally:
        if not args.keep:
            for f in ("capture.json", "trace.json", "tpmtop.prom"):
                try:
                    os.unlink(os.path.join(d, f))
                except FileNotFoundError:
                    pass
            if args.dir is None:
                os.rmdir(d)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
