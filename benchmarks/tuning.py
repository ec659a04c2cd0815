#!/usr/bin/env python3
"""Which tuning knobs earn their default: `tpmtop bench` with each knob on and off, a private
swtpm against an external one, both engines, idle and under two busy loops, in one run.

A knob (tpmtop/settings.py) stays on by default only where this shows it helping both session
engines (native and esys), idle and under load. Each configuration is one `tpmtop bench --json`
process (a fresh interpreter, the knobs given by --set), run in rounds that interleave the
configurations (A B C …, B C … A, …: each round starts one later) so that a change in the
shared machine's load falls on all of them alike; a figure is the median over the rounds of
each run's p50, a ratio the median over the rounds of that round's ratio. Run it from a tree
nothing edits meanwhile: each bench is a new process.

    private      --sim, the defaults (every knob as tpmtop/settings.py has it)
    +placement   --sim --set placement=on
    +busy_poll   --sim --set busy_poll=on
    external     -T swtpm:host=127.0.0.1,port=P: a swtpm this benchmark starts (nothing moves it),
                 in the benchmark's session, as `swtpm … &` from the shell that runs tpmtop
    ext+busy     the external swtpm, --set busy_poll=on
    ext-setsid   another external swtpm, started in a session of its own (as tpmtop started its
                 private one until 2026-12-06): with the kernel's autogroup scheduling a session
                 is a scheduling group, and this row shows what that costs

Printed per condition: op and wire p50 (µs) of each engine/mode, then the ratios
private/external (the issue's line: esys with the private swtpm no slower than with an
external one) and knob-on/knob-off.

    .venv/bin/python benchmarks/tuning.py [-n 100] [--rounds 6] [--load 2] [--modes none,reuse]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import describe

TPMTOP = [sys.executable, "-m", "tpmtop"]


def _free_port() -> int:
    """A port P with P+1 free too (swtpm's control channel)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        try:
            with socket.socket() as s2:
                s2.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
    raise RuntimeError("no free port pair")


class ExternalSwtpm:
    """A swtpm on TCP, as a user runs one: tpmtop did not start it and never moves it."""

    def __init__(self, own_session: bool = False) -> None:
        self.dir = tempfile.mkdtemp(prefix="tpmtop-bench-swtpm-")
        self.port = _free_port()
        self.proc = subprocess.Popen(
            ["swtpm", "socket", "--tpm2", "--tpmstate", f"dir={self.dir}",
             "--server", f"type=tcp,port={self.port}", "--ctrl", f"type=tcp,port={self.port + 1}",
             "--flags", "not-need-init,startup-clear"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=own_session)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("the external swtpm did not listen")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def configs(ext: ExternalSwtpm, setsid: ExternalSwtpm) -> dict[str, list[str]]:
    tcti = ["-T", f"swtpm:host=127.0.0.1,port={ext.port}"]
    return {
        "private": ["--sim"],
        "+placement": ["--sim", "--set", "placement=on"],
        "+busy_poll": ["--sim", "--set", "busy_poll=on"],
        "external": tcti,
        "ext+busy": [*tcti, "--set", "busy_poll=on"],
        "ext-setsid": ["-T", f"swtpm:host=127.0.0.1,port={setsid.port}"],
    }


def bench(tpm: list[str], a: argparse.Namespace) -> dict[tuple[str, str], tuple[float, float]]:
    """(engine, mode) -> (op p50, wire p50) in µs, from one `tpmtop bench --json -` process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPMTOP_")}  # only --set
    cmd = [*TPMTOP, *tpm, "bench", "--op", "extend", "--modes", a.modes, "--engine", "native,esys",
           "-n", str(a.n), "--json", "-"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[-400:]}")
    cap = json.loads(r.stdout)
    return {(run["engine"], run["mode"]): (run["op_us"]["p50"], run["wire_us"]["p50"]) for run in cap["runs"]}


def ratio(got: dict[str, list[dict[tuple[str, str], tuple[float, float]]]], x: str, y: str,
          k: tuple[str, str], i: int) -> float:
    """The median over the rounds of x/y in each round (x and y ran minutes apart at most)."""
    return statistics.median(rx[k][i] / ry[k][i] for rx, ry in zip(got[x], got[y], strict=True))


def fmt(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=100, help="operations per engine/mode per bench run")
    ap.add_argument("--rounds", type=int, default=6, help="interleaved rounds per condition")
    ap.add_argument("--load", type=int, default=2, help="busy loops for the loaded condition")
    ap.add_argument("--modes", default="none,reuse")
    ap.add_argument("--configs", default=None,
                    help="a comma-separated subset of the configurations (default: all; private and external always)")
    a = ap.parse_args()
    print(f"# {describe()}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; n={a.n} per engine/mode, "
          f"{a.rounds} interleaved rounds, median of the rounds' p50s; the machine may be shared: "
          f"load average before each condition below")
    ext, setsid = ExternalSwtpm(), ExternalSwtpm(own_session=True)
    try:
        cfgs = configs(ext, setsid)
        if a.configs:
            keep = {"private", "external", *a.configs.split(",")}
            cfgs = {k: v for k, v in cfgs.items() if k in keep}
        for cond in ("idle", f"{a.load} busy loops"):
            loops: list[subprocess.Popen[bytes]] = []
            try:
                if a.load and cond != "idle":
                    loops = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(a.load)]
                    time.sleep(1)
                print(f"\n## {cond} (load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
                got: dict[str, list[dict[tuple[str, str], tuple[float, float]]]] = {c: [] for c in cfgs}
                names = list(cfgs)
                for r in range(a.rounds):
                    # each round starts one configuration later: none is always first or last
                    for name in names[r % len(names):] + names[:r % len(names)]:
                        got[name].append(bench(cfgs[name], a))
            finally:
                for p in loops:
                    p.kill()
                    p.wait()
            keys = sorted(got["private"][0])
            med = {c: {k: tuple(statistics.median(r[k][i] for r in rs) for i in (0, 1)) for k in keys}
                   for c, rs in got.items()}
            print("config       " + "  ".join(f"{e}/{m} op, wire".rjust(24) for e, m in keys))
            for c in cfgs:
                print(f"{c:<12} " + "  ".join(f"{fmt(med[c][k][0])}, {fmt(med[c][k][1])}".rjust(24) for k in keys))
            print("ratios of op p50 (wire p50): the median over the rounds of each round's ratio")
            for label, x, y in (("private/external", "private", "external"),
                                ("+placement/private", "+placement", "private"),
                                ("+placement/external", "+placement", "external"),
                                ("+busy_poll/private", "+busy_poll", "private"),
                                ("ext+busy/external", "ext+busy", "external"),
                                ("ext-setsid/external", "ext-setsid", "external")):
                if x not in got or y not in got:
                    continue
                cells = [f"×{ratio(got, x, y, k, 0):.2f} (×{ratio(got, x, y, k, 1):.2f})".rjust(24) for k in keys]
                print(f"{label:<20} " + "  ".join(cells))
            for k in (k for k in keys if k[0] == "esys"):
                per = [p[k][0] / e[k][0] for p, e in zip(got["private"], got["external"], strict=True)]
                print(f"esys {k[1]} private/external op p50: ×{statistics.median(per):.2f} (median of "
                      f"{len(per)} rounds; private no slower in {sum(r <= 1 for r in per)} of them) ({cond})")
    finally:
        ext.stop()
        setsid.stop()


if __name__ == "__main__":
    main()
