"""The header's ops/s counts the run its rate applies to (the header's engine, mode and op: the
Latency panel's run and its count), not the interleaved `none` baseline with it: per-command at
"rate 100/s" read 130 ops/s while its own count grew ~100/s. Through the view-model on a real
swtpm; the meter's clock is the test's, so the rate is exact whatever the machine's load."""

from __future__ import annotations

from tests.helpers.workload import step_until
from tpmtop.sources.meters import RateMeter
from tpmtop.viewmodel.dashboard import Dashboard


def _run_ops(src, mode: str) -> int:
    return next((r.ops for r in src.runs() if r.key == (src.engine, mode, src.op)), 0)


def test_header_rate_is_the_runs_own(live):
    src = live(start_running=True, rate=0, mode="per-command")
    dash = Dashboard(src)
    now = [0.0]
    dash.ops_rate = RateMeter(clock=lambda: now[0])
    step_until(src, 1)
    dash.changed()
    dash.stats(80)
    before, none_before = _run_ops(src, "per-command"), _run_ops(src, "none")
    step_until(src, 30)  # the baseline runs a burst of `none` operations after each (until 40 ran)
    now[0] = 1.0
    dash.changed()
    dash.stats(80)
    own, baseline = _run_ops(src, "per-command") - before, _run_ops(src, "none") - none_before
    assert own == 30 and baseline > 0  # the case the sum got wrong: both ran in that second
    assert dash.header().ops_per_s == own

    # Another run (m): counted from its own start, not from per-command's count nor the sum.
    src.choose(mode="reuse")
    dash.changed()
    dash.stats(80)
    start = _run_ops(src, "reuse")
    step_until(src, 20)
    now[0] = 3.0
    dash.changed()
    dash.stats(80)
    assert dash.header().ops_per_s == (_run_ops(src, "reuse") - start) / 2.0 == 10.0
