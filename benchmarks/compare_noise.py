"""How often two identical `tpmtop bench` runs pass `compare` as "within noise" on every row.

    .venv/bin/python benchmarks/compare_noise.py [--runs 20] [-n 3000]

Runs `tpmtop bench --sim --engine native -n N --json` RUNS times, one after the other (the way
a user makes a before and an after), then compares every pair of runs with
``tpmtop.compare.compare`` (MIN_EFFECT as it stands), judged with each capture's floor (as
`tpmtop compare` judges them) and without it, and prints: each run's start, load average,
floor (a 1-byte GetRandom's round trip, p50) and operation p50 per mode (a step in the
machine's speed shows there, not in the load average), then for consecutive pairs and for all
pairs how many have a row called slower or faster, and the spread of the p50 ratios.
docs/captures.md ("Run-to-run noise") quotes it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

from machine import describe  # noqa: E402 - benchmarks/machine.py

from tpmtop.compare import compare, floor_move, floor_probes  # noqa: E402


def judged_rows(a: dict, b: dict, with_floor: bool) -> tuple[int, list[float]]:
    rows = compare(a, b, floor_move(a, b)[0] if with_floor else None)
    judged = sum(r[f"{k}_verdict"] in ("slower", "faster") for r in rows for k in ("p50", "p99"))
    ratios = [max(r["p50_ratio"], 1 / r["p50_ratio"]) for r in rows if r["p50_ratio"]]
    return judged, ratios


def summary(name: str, pairs: list[tuple[int, int]], caps: dict[int, dict], with_floor: bool) -> str:
    bad, ratios = 0, []
    for a, b in pairs:
        n, r = judged_rows(caps[a], caps[b], with_floor)
        bad += n > 0
        ratios += r
    ratios.sort()
    q = (lambda f: ratios[min(len(ratios) - 1, int(len(ratios) * f))]) if ratios else (lambda f: float("nan"))
    return (f"{name}: {len(pairs) - bad} of {len(pairs)} pairs within noise on every row; p50 ratios "
            f"median x{q(0.5):.2f}, 95 % x{q(0.95):.2f}, max x{q(1.0):.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("-n", type=int, default=3000)
    args = ap.parse_args()
    print(describe())
    caps: dict[int, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(1, args.runs + 1):
            out = os.path.join(tmp, f"run-{i}.json")
            start, load = time.strftime("%H:%M:%S", time.gmtime()), os.getloadavg()[0]
            subprocess.run([sys.executable, "-m", "tpmtop", "bench", "--sim", "--engine", "native", "-n",
                            str(args.n), "--quiet", "--json", out], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(out, encoding="utf-8") as f:
                caps[i] = json.load(f)
            p50s = " ".join(f"{r['mode']} {r['op_us']['p50']:.0f}" for r in caps[i]["runs"])
            fl = floor_probes(caps[i])
            floor = f"floor {fl[len(fl) // 2]:.1f}" if fl else "no floor"
            print(f"run {i:>2} {start} UTC load {load:.1f}: {floor}, op p50 µs {p50s}")
    runs = sorted(caps)
    for with_floor in (True, False):
        how = "with the floor" if with_floor else "without the floor"
        print(summary(f"{how}, consecutive pairs", list(zip(runs[::2], runs[1::2], strict=False)), caps, with_floor))
        print(summary(f"{how}, all pairs", list(itertools.combinations(runs, 2)), caps, with_floor))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
