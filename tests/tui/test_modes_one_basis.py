"""Issue 38: the Modes panel's boot line never puts a TPM-only estimate beside op p50s. Read
through the view-model (the numbers its line and `p` print, not a widget) on a real swtpm
after each mode has run: a mode not yet run is priced as op time (its commands + per-command's
host time), so a kept session is never shown cheaper than no session, and never dearer than
a fresh session per extend; once each has run, the measured op p50s keep the same order.

On the slb9670 profile, so that the modes are milliseconds apart (6.4, 24, 98, 151 ms a
PCR extend) and a loaded machine's jitter cannot reorder them; swtpm alone puts none and
reuse within a few hundred µs of each other."""

from __future__ import annotations

import statistics

from tests.helpers.workload import PROBES, one_speed, step_until
from tpmtop.viewmodel.dashboard import Dashboard
from tpmtop.viewmodel.rows.modes import projection_of


def _run(src, dash, mode: str, ops: int) -> None:
    src.choose(mode=mode)
    step_until(src, ops)
    dash.changed()


def _projection(dash):
    line = dash.stats(80).boot  # the tables' runs, which the projection then reads
    comps, n, _, _, _, per_mode, _ = dash.projection("-")
    return projection_of(comps, n, per_mode), line


def test_modes_line_keeps_one_basis_as_each_mode_runs(live):
    src = live(profile="slb9670", start_running=True, rate=0, mode="per-command")
    dash = Dashboard(src)
    _run(src, dash, "per-command", 20)  # none runs interleaved as its baseline
    proj, line = _projection(dash)
    none, pc, reuse = (proj.modes[m] for m in ("none", "per-command", "reuse"))
    assert "per-command" in dash.projection("-")[5] and "none" in dash.projection("-")[5]
    assert "TPM time only" not in line and "not run, its commands' wire + host time" in line
    # reuse not run: an estimate on the op basis (its commands' own host work), between the two measured modes
    assert "Eb + Eh10 − Ew10 + hEb + hM" in reuse.formula and reuse.total_s is not None
    assert none.total_s <= reuse.total_s <= pc.total_s, (none.arithmetic, reuse.arithmetic, pc.arithmetic)
    estimate = reuse
    # saved not run: no ContextSave measured, so no price rather than one without it
    assert proj.modes["saved"].estimate_s is None and "C (ContextSave)" in proj.modes["saved"].reason

    _run(src, dash, "reuse", 20)
    proj, line = _projection(dash)
    none, pc, reuse = (proj.modes[m] for m in ("none", "per-command", "reuse"))
    assert "N × op p50" in line and "reuse" in dash.projection("-")[5]
    assert none.total_s <= reuse.total_s <= pc.total_s, (none.arithmetic, reuse.arithmetic, pc.arithmetic)
    # the chip's HMAC'd extend is ×3.8 its plain one: Eh10 − Ew10 carries it (24.59 s against 24.49 s here)
    assert 0.8 <= estimate.total_s / reuse.total_s <= 1.2, (estimate.arithmetic, reuse.arithmetic)

    _run(src, dash, "saved", 15)
    proj, line = _projection(dash)
    saved = proj.modes["saved"]
    assert saved.total_s is not None and "op p50" in saved.formula
    assert proj.modes["none"].total_s <= saved.total_s <= proj.modes["per-command"].total_s
    assert "TPM time only" not in line


def _judged_trial(live) -> tuple[float, str | None, str, str, str]:
    """One trial: reuse's estimate as the Modes line shows it after per-command ran, then,
    the accounts started again, reuse run and measured on the same swtpm. Returns (estimate ÷
    measured, why the trial cannot be judged or None, the speeds read, both arithmetics).

    The machine ran at one speed across the trial when the interleaved baseline's bursts —
    a plain extend back to back (`Eb`, wire p50), its host work and the session's HMAC work
    (`hEb`, `hM`) — read the same in both phases, and reuse's own extends ran at the speed
    its phase's bursts saw (tests/helpers/workload.py, `one_speed`)."""
    src = live(start_running=True, rate=0, mode="per-command")
    try:
        dash = Dashboard(src)
        _run(src, dash, "per-command", 600)
        estimate, line = _projection(dash)
        estimate = estimate.modes["reuse"]
        comps = dash.projection("-")[0]  # the runs _projection's stats() read
        assert {"hL", "hS", "hF", "Eh10", "Ew10", "Eb", "hEb", "hM"} <= set(comps)
        assert "reuse" not in dash.projection("-")[5] and "not run, its commands' wire + host time" in line
        assert estimate.formula == "(L + S + F + hL + hS + hF) + N × (Eb + Eh10 − Ew10 + hEb + hM)"
        assert "back to back (Eb, hEb)" in estimate.note and "(Eh10 − Ew10" in estimate.note
        src.reset_stats()  # reuse's phase on its own: its op p50 and its baseline's Eb
        _run(src, dash, "reuse", 10_000)
        measured = _projection(dash)[0].modes["reuse"]
        comps_then = dash.projection("-")[0]  # the runs _projection's stats() read
        assert "op p50" in measured.formula
        run = next(r for r in src.runs() if r.mode == "reuse" and r.op == "extend")
        wire = run.commands["TPM2_CC_PCR_Extend"]["p50"]
    finally:
        src.close()  # one swtpm at a time (idempotent: the fixture closes it again)
    speeds = ", ".join(f"{k} {comps[k]:.1f} then {comps_then[k]:.1f} µs" for k in PROBES)
    speeds += f"; reuse's own extends {wire:.1f} µs on the wire"
    moved = None if one_speed(comps, comps_then, wire) else speeds
    return float(estimate.total_s / measured.total_s), moved, speeds, estimate.arithmetic, measured.arithmetic


TRIALS = 8  # at most: the first trial in which the machine held one speed is the one judged


def test_a_mode_not_run_is_priced_from_its_own_commands_host_and_wire(live, record_property):
    """Issue 55 item 1: reuse not yet run, priced from the commands it would send at this
    sitting's costs, host and wire apart, read from the Modes line before reuse runs, against
    reuse then measured on the same swtpm.

    A kept session's extends run back to back; the PCR_Extend inside per-command follows
    StartAuthSession's wait, and a command after a wait costs more, on the wire and on the
    host. So the `none` baseline comes in bursts: per extend, a plain extend back to back (Eb
    wire, hEb host, each after the session's HMAC work, hM, timed on its own) plus the TPM's
    HMAC work, Eh10 − Ew10 (the HMAC'd extend over the burst's first plain one, both after an
    operation, at p10: under load their p50s carry the wait for a CPU). Before (priced on
    Eh + hE0 + hM): ×1.21–1.45 in 27 of 30 runs, none within ±20 %; the estimate this issue
    reported was ×5 its measured value.

    On this VM a command's wire time has regimes ×2–3 apart (swtpm and the thread that waits
    for it hand over on one CPU, or wake each other across two; under busy loops, the wait for
    a CPU), flipping for seconds at a time, and reuse measured twice in a row, nothing
    estimated, disagrees with itself beyond ±20 % in 3 of 16 trials at load 1.5 and 5 of 16
    under two busy loops (benchmarks/estimate_regimes.py, "reuse twice"): no estimate can be
    held closer to a value than the value holds to itself. So each trial also times the same
    work in both phases — the baseline's bursts, which run beside per-command and beside reuse
    alike: `Eb` (wire), `hEb` and `hM` (host) — and the first trial in which each agreed within
    ±10 % and reuse's own extends ran at its bursts' speed (wire ×0.67–1.5 of `Eb`) is judged.
    Such trials came within ±20 % in 11 of 11 at load 1.5, but in 3 of 6 under two busy loops
    (×1.23–1.32 where the slow regime lands in Eh10 − Ew10: docs/dashboard.md, "How close the
    estimate gets"); so ±20 % is the benchmark's figure, and this test's bound is one that a
    wrong basis breaks whatever the machine does (the reported ×5): ×⅓–×3, on the judged trial,
    or on the median of all where the machine moved in every one."""
    ratios, moved = [], []
    for _ in range(TRIALS):
        ratio, moved_by, speeds, est, meas = _judged_trial(live)
        if moved_by is None:
            record_property("estimate_over_measured", round(ratio, 3))
            record_property("estimate", est)
            record_property("measured", meas)
            record_property("trials_the_machine_moved_in", len(moved))
            assert 1 / 3 <= ratio <= 3, (ratio, est, meas, speeds)
            return
        ratios.append(ratio)
        moved.append(moved_by)
    assert 1 / 3 <= statistics.median(ratios) <= 3, (ratios, moved)
