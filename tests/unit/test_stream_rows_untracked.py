"""A stream row is strings and a flag: the garbage collector does not track it, so the rows a
replay holds (up to 100,000) and those a live stream makes per command add nothing to the
walk of a full collection, which stops every thread (benchmarks/ui_load.py --gc-only)."""

from __future__ import annotations

import gc

from tests.helpers.paths import TESTS
from tpmtop.sources.replay import ReplaySource, load
from tpmtop.viewmodel.rows.stream import captured_rows, mark_row

FIXTURE = TESTS / "tui_fixtures" / "slb9670-extend.json"


def test_stream_rows_are_not_tracked_by_the_garbage_collector():
    rows = captured_rows(ReplaySource(load(FIXTURE), FIXTURE).captured_stream())
    assert len(rows) > 100
    assert not any(gc.is_tracked(r) for r in rows)
    assert not gc.is_tracked(mark_row(5, 0, "TPM reset"))
    assert gc.is_tracked([rows[0]])  # what holds them is tracked: the check can tell
