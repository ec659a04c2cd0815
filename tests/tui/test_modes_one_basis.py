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

from tests.helpers.workload import BLOCKS, block, step_until
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
    assert "Eb + T + hEb + hM" in reuse.formula and reuse.total_s is not None
    # the chip's HMAC'd extend (24.4 ms) is told apart from its plain one (6.4 ms), and priced
    assert "T = Eh10 − Ew10 = " in reuse.note, reuse.note
    assert none.total_s <= reuse.total_s <= pc.total_s, (none.arithmetic, reuse.arithmetic, pc.arithmetic)
    estimate = reuse
    # saved not run: no ContextSave measured, so no price rather than one without it
    assert proj.modes["saved"].estimate_s is None and "C (ContextSave)" in proj.modes["saved"].reason

    _run(src, dash, "reuse", 20)
    proj, line = _projection(dash)
    none, pc, reuse = (proj.modes[m] for m in ("none", "per-command", "reuse"))
    assert "N × op p50" in line and "reuse" in dash.projection("-")[5]
    assert none.total_s <= reuse.total_s <= pc.total_s, (none.arithmetic, reuse.arithmetic, pc.arithmetic)
    # the chip's HMAC'd extend is ×3.8 its plain one: T carries it (24.59 s against 24.49 s here)
    assert 0.8 <= estimate.total_s / reuse.total_s <= 1.2, (estimate.arithmetic, reuse.arithmetic)

    _run(src, dash, "saved", 15)
    proj, line = _projection(dash)
    saved = proj.modes["saved"]
    assert saved.total_s is not None and "op p50" in saved.formula
    assert proj.modes["none"].total_s <= saved.total_s <= proj.modes["per-command"].total_s
    assert "TPM time only" not in line


def test_a_mode_not_run_is_priced_from_its_own_commands_host_and_wire(live, record_property):
    """Issue 55 item 1: reuse not yet run, priced from the commands it would send at this
    sitting's costs, host and wire apart, read from the Modes line before reuse runs, against
    reuse then measured on the same swtpm: within ±20 %.

    A kept session's extends run back to back; the PCR_Extend inside per-command follows
    StartAuthSession's wait, and a command after a wait costs more, on the wire and on the
    host. So the `none` baseline comes in bursts: per extend, a plain extend back to back (Eb
    wire, hEb host, each after the session's HMAC work, hM, timed on its own) plus T, the
    TPM's HMAC work: Eh10 − Ew10 (the HMAC'd extend over the burst's first plain one, both
    after an operation, at p10) where the two are told apart, else 0 — on swtpm the work is
    about a microsecond, and ~15 burst-first samples moved Eh10 − Ew10 by −12 to +34 µs
    between trials (docs/dashboard.md, "How close the estimate gets"). Before this basis
    (Eh + hE0 + hM): ×1.21–1.45 in 27 of 30 runs; the estimate this issue reported was ×5.

    On this VM a command's wire time has regimes ×2–3 apart that flip for seconds at a time
    (17 or 35 µs a PCR_Extend under busy loops), so one estimate read in one regime and reuse
    measured in another is ×0.5 or ×2 whatever the basis. So the two alternate in twenty
    short blocks on one swtpm, each estimate read before reuse runs (the accounts started
    again), each reuse measured right after, and the blocks' median ratio is judged: a
    wrong basis (the reported ×5, a term counted twice) moves every block, a regime some."""
    src = live(start_running=True, rate=0, mode="per-command")
    dash = Dashboard(src)
    blocks = [block(src, dash) for _ in range(BLOCKS)]
    for b in blocks:  # each estimate made as the Modes line makes it, reuse not run
        assert {"hL", "hS", "hF", "Eh10", "Ew10", "Eh25", "Ew75", "Eb", "hEb", "hM"} <= set(b.comps)
        assert "reuse" not in b.measured_modes and "not run, its commands' wire + host time" in b.line
        assert b.estimate.formula == "(L + S + F + hL + hS + hF) + N × (Eb + T + hEb + hM)"
        assert "back to back (Eb, hEb)" in b.estimate.note and "T: Eh10 − Ew10" in b.estimate.note
        assert ("T = 0: " if b.comps["Eh25"] <= b.comps["Ew75"] else "T = Eh10 − Ew10 = ") in b.estimate.note
        assert "op p50" in b.measured.formula
    ratios = sorted(b.ratio for b in blocks)
    median = statistics.median(ratios)
    record_property("estimate_over_measured", [round(r, 3) for r in ratios])
    record_property("median", round(median, 3))
    record_property("sum_ratio", round(sum(float(b.estimate.total_s) for b in blocks)
                                       / sum(float(b.measured.total_s) for b in blocks), 3))
    assert 0.8 <= median <= 1.2, (median, [round(r, 3) for r in ratios],
                                  blocks[0].estimate.arithmetic, blocks[0].measured.arithmetic)
