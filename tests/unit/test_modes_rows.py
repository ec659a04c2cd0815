"""The Modes panel's rows and lines (tpmtop.viewmodel.rows.modes), from runs as a live workload
or a capture gives them: the headline, the interleaved baseline's label, the boot line."""

from __future__ import annotations

from tpmtop.sessions.modes import MODES
from tpmtop.sources.runs import RunView
from tpmtop.viewmodel.rows.modes import baseline_note, comparison, headline, projection_summary


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
    above "saved 61 s" per 1,000 extends); a mode that did not: priced from the commands and
    marked as TPM time only."""
    comps = {"E0": 6360.0, "L": 36977.0, "S": 84747.0, "F": 3195.0, "Eh": 24356.0}
    line = projection_summary(comps, 1000, {"saved": 98894.0, "none": 6431.0})
    ran, not_run = line.split(";")
    assert "N × op p50" in ran and "saved 99 s" in ran and "none 6.4 s" in ran and "61 s" not in ran
    assert "TPM time only" in not_run and "per-command ≈150 s" in not_run and "reuse ≈24 s" in not_run
