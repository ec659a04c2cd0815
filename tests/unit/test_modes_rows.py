"""The Modes panel's rows and lines (tpmtop.viewmodel.rows.modes), from runs as a live workload
or a capture gives them: the headline, the interleaved baseline's label, the boot line."""

from __future__ import annotations

from tpmtop.sessions.modes import MODES
from tpmtop.sources.runs import RunView
from tpmtop.viewmodel.rows.modes import baseline_note, comparison, headline, projection_of, projection_summary


def run(mode: str, p50: float, ops: int = 100, engine: str = "native") -> RunView:
    summary = {"count": ops, "p50": p50, "p90": p50, "p99": p50, "max": p50, "mean": p50}
    return RunView(engine, mode, "extend", ops, summary, summary, summary, {}, {})


def test_the_headline_is_the_running_modes_ratio_to_none():
    rows = comparison([run("none", 40.0), run("per-command", 1200.0)], "extend", MODES, {("native", "extend"): 44})
    assert headline(rows, ("native", "per-command"), measuring=True).startswith("[b]per-command ×30.0 vs none[/]")
    assert [r.interleaved for r in rows] == [44, 0]  # only the `none` row carries it
    assert baseline_note(rows, "per-command", 42) == "none*: interleaved with per-command's"
    # no baseline yet: the live workload says it is measuring; a capture says nothing
    alone = comparison([run("per-command", 1200.0)], "extend", MODES)
    assert "measuring none" in headline(alone, ("native", "per-command"), measuring=True)
    assert headline(alone, ("native", "per-command"), measuring=False) == ""


def test_the_boot_line_multiplies_the_p50s_shown():
    """A mode that ran: N × its op p50 (the slb9670 figures from issue 24: saved 98,894 µs
    above "saved 61 s" per 1,000 extends); a mode that did not: priced from the commands plus
    per-command's host time per operation (H), so that the line has one basis."""
    comps = {"E0": 6360.0, "L": 36977.0, "S": 84747.0, "F": 3195.0, "Eh": 24356.0, "H": 600.0}
    line = projection_summary(comps, 1000, {"saved": 98894.0, "none": 6431.0})
    ran, not_run = line.split(";")
    assert "N × op p50" in ran and "saved 99 s" in ran and "none 6.4 s" in ran and "61 s" not in ran
    assert "commands + per-command's host time" in not_run and "TPM time only" not in line
    assert "per-command ≈150 s" in not_run and "reuse ≈25 s" in not_run


def test_without_host_time_no_tpm_only_estimate_stands_beside_op_p50s():
    """Issue 38: "none 31 ms · per-command 650 ms; not run, TPM time only: reuse ≈22 ms" put a
    TPM-only estimate below an op p50 that includes host time. Without H the line shows only
    what ran; alone, the TPM-time figures say what they are."""
    comps = {"E0": 250.0, "L": 900.0, "S": 3000.0, "F": 80.0, "Eh": 250.0}
    line = projection_summary(comps, 87, {"none": 356.0, "per-command": 7470.0})
    assert "reuse" not in line and "TPM time only" not in line
    assert "TPM time only:[/] none ≈22 ms" in projection_summary(comps, 87, {})


def test_saved_is_priced_with_contextsave_or_not_at_all():
    """saved = (L + S + F) + N × (L + Eh + C): without C (ContextSave) its row has no price."""
    comps = {"E0": 6360.0, "L": 36977.0, "S": 84747.0, "F": 3195.0, "Eh": 24356.0}
    proj = projection_of(comps, 1000, {})
    assert proj.modes["saved"].estimate_s is None and "C (ContextSave)" in proj.modes["saved"].reason
    proj = projection_of(comps | {"C": 36977.0}, 1000, {})
    assert proj.modes["saved"].formula == "(L + S + F) + N × (L + Eh + C)"
    assert float(proj.modes["saved"].total_s) == (36977 + 84747 + 3195 + 1000 * (36977 + 24356 + 36977)) / 1e6


def test_a_ratio_from_few_operations_says_so():
    """Issue 55 item 5: the first "×45.0 vs none" came from 6 operations and settled at ×23.7,
    with no mark. Fewer than FEW_OPS on either side: the ratio says how many."""
    from tpmtop.viewmodel.rows.modes import FEW_OPS, vs_none

    few = comparison([run("none", 40.0, ops=100), run("per-command", 1800.0, ops=6)], "extend", MODES)
    assert vs_none(few, ("native", "per-command")) == "×45.0 vs none (6 ops: few)"
    assert "(6 ops: few)" in headline(few, ("native", "per-command"), measuring=True)
    base_few = comparison([run("none", 40.0, ops=4), run("per-command", 1800.0, ops=100)], "extend", MODES)
    assert vs_none(base_few, ("native", "per-command")) == "×45.0 vs none (4 ops: few)"
    enough = comparison([run("none", 40.0, ops=FEW_OPS), run("per-command", 948.0, ops=FEW_OPS)], "extend", MODES)
    assert vs_none(enough, ("native", "per-command")) == "×23.7 vs none"
