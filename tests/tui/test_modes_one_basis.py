"""Issue 38: the Modes panel's boot line never puts a TPM-only estimate beside op p50s. Read
through the view-model (the numbers its line and `p` print, not a widget) on a real swtpm
after each mode has run: a mode not yet run is priced as op time (its commands + per-command's
host time), so a kept session is never shown cheaper than no session, and never dearer than
a fresh session per extend; once each has run, the measured op p50s keep the same order.

On the slb9670 profile, so that the modes are milliseconds apart (6.4, 24, 98, 151 ms a
PCR extend) and a loaded machine's jitter cannot reorder them; swtpm alone puts none and
reuse within a few hundred µs of each other."""

from __future__ import annotations

import time

from tpmtop.viewmodel.dashboard import Dashboard
from tpmtop.viewmodel.rows.modes import projection_of


def _run(src, dash, mode: str, ops: int) -> None:
    src.choose(mode=mode)
    deadline = time.monotonic() + 300
    done = 0
    while done < ops:
        assert time.monotonic() < deadline, f"{mode}: {done} of {ops} operations in 300 s"
        done += src.step(ops - done)[0]
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


def _reuse_estimate_then_measured(live) -> tuple[float, str, str]:
    """Reuse's not-run estimate as the Modes line shows it after per-command (its `none`
    baseline interleaved in bursts) has run, then reuse itself run on the same private swtpm:
    (estimate ÷ measured, the estimate's arithmetic, the measured one's)."""
    src = live(start_running=True, rate=0, mode="per-command")
    dash = Dashboard(src)
    _run(src, dash, "per-command", 600)
    comps = dash.projection("-")[0]
    assert {"hL", "hS", "hF", "Eh10", "Ew10", "Eb", "hEb", "hM"} <= set(comps)
    estimate, line = _projection(dash)
    estimate = estimate.modes["reuse"]
    assert "reuse" not in dash.projection("-")[5] and "not run, its commands' wire + host time" in line
    assert estimate.formula == "(L + S + F + hL + hS + hF) + N × (Eb + Eh10 − Ew10 + hEb + hM)"
    assert "back to back (Eb, hEb)" in estimate.note and "(Eh10 − Ew10" in estimate.note
    _run(src, dash, "reuse", 10_000)
    measured = _projection(dash)[0].modes["reuse"]
    assert "op p50" in measured.formula
    return float(estimate.total_s / measured.total_s), estimate.arithmetic, measured.arithmetic


def test_a_mode_not_run_is_priced_from_its_own_commands_host_and_wire(live, record_property):
    """Issue 55 item 1: reuse not yet run, priced from the commands it would send at this
    sitting's costs, host and wire apart, comes within ±20 % of reuse then measured (swtpm).

    A kept session's extends run back to back; the PCR_Extend inside per-command follows
    StartAuthSession's wait, and a command after a wait costs more, on the wire and on the
    host. So the `none` baseline comes in bursts: per extend, a plain extend back to back (Eb
    wire, hEb host, each after the session's HMAC work, hM, timed on its own) plus the TPM's
    HMAC work, Eh10 − Ew10 (the HMAC'd extend over the burst's first plain one, both after an
    operation, at p10: under load their p50s carry the wait for a CPU). Before (priced on
    Eh + hE0 + hM): ×1.21–1.45 in 27 of 30 runs, none within.

    The estimate is made before reuse runs, so a change in the shared machine's speed between
    the two phases lands in the ratio: docs/dashboard.md ("How close the estimate gets") gives
    the runs, quiet and under the suite's stress run: within ±20 % in 32 of 44, median ×1.07.
    This machine's speed moves within seconds (a 1-byte GetRandom's median round trip read
    18–60 µs across one run of this test at load 1), so ±20 % is a figure of the docs, not this
    test's bound: asserted, it failed about one run in four. The test keeps a bound that a wrong
    basis breaks — the estimate this issue reported was ×5 its measured value."""
    ratio, est, meas = _reuse_estimate_then_measured(live)
    record_property("estimate_over_measured", round(ratio, 3))  # the figures in docs/dashboard.md
    record_property("estimate", est)
    record_property("measured", meas)
    assert 1 / 3 <= ratio <= 3, (ratio, est, meas)
