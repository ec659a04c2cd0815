"""How close the Modes panel's not-run reuse estimate gets at swtpm speed, and why it moves.

Each trial is a fresh private swtpm and LiveSource, unpaced, as tests/tui/test_modes_one_basis.py
runs it. Two readings:

- **as shown**: per-command runs 600 operations (its `none` baseline interleaved in bursts);
  reuse's estimate is read as the Modes line shows it (tpmtop.boot.projection, `Eb + T +
  hEb + hM`, docs/dashboard.md); the accounts start again, reuse runs 10,000 extends
  and is measured. Beside the ratio: `Eb` (a plain extend back to back, wire p50, from the
  baseline's bursts) in the estimate's phase and again in reuse's — the same command in both
  phases (with `hEb` and `hM`, the bursts' host work), so whether the machine ran at one speed
  across them: "one speed" below where each agrees within ±10 % and reuse's own extends ran at
  the speed its phase's bursts saw (×0.67–1.5 of `Eb`).
- **reuse twice**: nothing estimated; reuse measured, the accounts started again, reuse
  measured again on the same swtpm (10,000 extends each): how far the measured value moves by
  itself.
- **blocks**: what the suite's test judges (tests/tui/test_modes_one_basis.py): on one swtpm,
  twenty blocks of (accounts started again, 100 per-command operations, the estimate read with
  reuse not run; accounts started again, 1,000 reuse extends measured); per trial the blocks'
  median ratio, and the ratio of the summed estimates to the summed measurements.

On a VM, whether swtpm and the thread that talks to it hand over on one CPU or wake each
other across two changes every wire time ×2–3, for seconds at a time. `--placement` turns on
the settings knob that keeps a private swtpm on its caller's CPU (tpmtop/tpm/placement.py; off
by default) to see whether that holds one regime.

    .venv/bin/python benchmarks/estimate_regimes.py --trials 8 [--only "as shown"|blocks] [--placement]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

from machine import describe  # noqa: E402 - benchmarks/machine.py

from tests.helpers.workload import BLOCKS, PROBES, block, one_speed, step_until  # noqa: E402 - the test's
from tpmtop import settings  # noqa: E402
from tpmtop.connect import open_tpm  # noqa: E402
from tpmtop.sources.live import LiveSource  # noqa: E402
from tpmtop.viewmodel.dashboard import Dashboard  # noqa: E402
from tpmtop.viewmodel.rows.modes import projection_of  # noqa: E402

EXTEND = "TPM2_CC_PCR_Extend"
READINGS = ("as shown", "reuse twice", "blocks")


def _run(src: LiveSource, mode: str, ops: int) -> None:
    src.choose(mode=mode)
    step_until(src, ops)


def _reuse(dash: Dashboard, *, estimate: bool) -> tuple[float, dict[str, float], float]:
    """(reuse's total for N extends: estimated without its own figure, or measured; the
    probes; reuse's PCR_Extend wire p50, or NaN where reuse has not run)."""
    dash.changed()
    dash.stats(80)
    comps, n, _, _, _, per_mode, _ = dash.projection("-")
    if estimate:
        per_mode = {m: v for m, v in per_mode.items() if m != "reuse"}
    wire = next((float(r.commands[EXTEND]["p50"]) for r in dash.source.runs()
                 if r.op == "extend" and r.mode == "reuse" and r.ops and EXTEND in r.commands), float("nan"))
    return float(projection_of(comps, n, per_mode).modes["reuse"].total_s), {k: comps[k] for k in PROBES}, wire


def blocks_trial() -> dict[str, Any]:
    """The test's twenty alternating blocks on one swtpm (tests/helpers/workload.py, block)."""
    src = LiveSource(open_tpm(sim=True), start_running=True, rate=0, mode="per-command", poll_interval=0.3)
    dash = Dashboard(src)
    try:
        blocks = [block(src, dash) for _ in range(BLOCKS)]
    finally:
        src.close()
    ratios = sorted(b.ratio for b in blocks)
    return {"ratio": statistics.median(ratios), "lowest": ratios[0], "highest": ratios[-1],
            "sum": sum(float(b.estimate.total_s) for b in blocks) / sum(float(b.measured.total_s) for b in blocks)}


def trial(kind: str, pc_ops: int = 600, reuse_ops: int = 10_000) -> dict[str, Any]:
    src = LiveSource(open_tpm(sim=True), start_running=True, rate=0, mode="per-command", poll_interval=0.3)
    dash = Dashboard(src)
    try:
        first_mode = "per-command" if kind == "as shown" else "reuse"
        _run(src, first_mode, pc_ops if kind == "as shown" else reuse_ops)
        first, probes, wire_first = _reuse(dash, estimate=kind == "as shown")
        src.reset_stats()  # the second phase on its own: its op p50 and its baseline's Eb
        _run(src, "reuse", reuse_ops)
        then, probes_then, wire = _reuse(dash, estimate=False)
        # reuse twice: its first phase's extends at the speed of that phase's bursts too
        held = one_speed(probes, probes_then, wire, None if kind == "as shown" else wire_first)
        return {"ratio": first / then, "Eb": probes["Eb"], "Eb_then": probes_then["Eb"], "reuse_wire": wire,
                "one_speed": held}
    finally:
        src.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--only", choices=READINGS, help="one reading")
    ap.add_argument("--per-command", type=int, default=600, help="per-command operations before the estimate")
    ap.add_argument("--reuse", type=int, default=10_000, help="reuse extends measured")
    ap.add_argument("--placement", action="store_true", help="keep the private swtpm on its caller's CPU")
    args = ap.parse_args()
    if args.placement:
        settings.use(settings.Settings(placement=True))
    print(describe())
    print(f"placement {'on' if args.placement else 'off (the default)'}; {time.strftime('%H:%M:%S %Z')}, "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"{'reading':<12}{'ratio':>7}{'Eb':>7}{'Eb then':>8}{'reuse':>7}  one speed   (wire p50s, µs)")
    for kind in [args.only] if args.only else READINGS:
        rows = []
        if kind == "blocks":
            print(f"{'reading':<12}{'median':>7}{'sum':>7}  single blocks")
            for _ in range(args.trials):
                r = blocks_trial()
                rows.append(r)
                print(f"{kind:<12}{r['ratio']:>6.2f}×{r['sum']:>6.2f}×  ×{r['lowest']:.2f}–{r['highest']:.2f}")
            medians = sorted(r["ratio"] for r in rows)
            print(f"blocks: {len(rows)} trials, medians ×{medians[0]:.2f}–{medians[-1]:.2f}, "
                  f"{sum(0.8 <= x <= 1.2 for x in medians)} within ±20 %; sums ×{min(r['sum'] for r in rows):.2f}–"
                  f"{max(r['sum'] for r in rows):.2f}")
            continue
        for _ in range(args.trials):
            r = trial(kind, args.per_command, args.reuse)
            rows.append(r)
            print(f"{kind:<12}{r['ratio']:>6.2f}×{r['Eb']:>7.1f}{r['Eb_then']:>8.1f}{r['reuse_wire']:>7.1f}"
                  f"  {'yes' if r['one_speed'] else 'no'}")
        for label, sel in (("all", rows), ("one speed", [r for r in rows if r["one_speed"]])):
            ratios = sorted(r["ratio"] for r in sel)
            if ratios:
                inside = sum(0.8 <= x <= 1.2 for x in ratios)
                print(f"{kind}, {label}: {len(ratios)} trials, median ×{statistics.median(ratios):.2f}, "
                      f"{inside} within ±20 %, ×{ratios[0]:.2f}–{ratios[-1]:.2f}")
    print(f"ended {time.strftime('%H:%M:%S %Z')}, load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
