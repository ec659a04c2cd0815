"""The dashboard's tables fit their width: which columns stay, and how wide the names get."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult

from tpmtop.tui.widgets.latency import COLUMNS, NAME_GROW_TO
from tpmtop.tui.widgets.table import KeyedTable

LONG = "StartAuthSession · user"  # 23 characters: cut at the names' 21 before


class _TableApp(App):
    CSS = "KeyedTable { width: 1fr; }"

    def compose(self) -> ComposeResult:
        yield KeyedTable(COLUMNS, grow_to=NAME_GROW_TO, grow_priority=5.5, id="t")


def _row(label: str) -> tuple:
    return (label, "5", "", "1.0", "2.0", "3.0", "4.0", "5.0")


async def _fit(width: int, labels: list[str]) -> tuple[int, list[str]]:
    app = _TableApp()
    async with app.run_test(size=(width, 10)) as pilot:
        table = app.query_one(KeyedTable)
        table.sync([(f"k{i}", _row(label)) for i, label in enumerate(labels)])
        await pilot.pause()
        return table.columns[table.ordered_columns[0].key].width, table.shown_columns


@pytest.mark.parametrize("width", [120, 90])
async def test_a_long_name_is_shown_whole_where_the_panel_has_room(width):
    """Wide enough: the names' column takes what the longest name needs, and every column whose
    priority is above the names' growth (all but p90 and last at 90) stays."""
    first, shown = await _fit(width, ["PCR_Extend", LONG])
    assert first == len(LONG)
    assert {"count", "errors", "p50", "p99", "max"} <= set(shown)


async def test_names_grow_no_further_than_the_longest_needs():
    first, _ = await _fit(120, ["PCR_Extend", "ContextLoad"])
    assert first == 21  # the base width: nothing here needs more


async def test_a_narrow_panel_drops_p90_and_last_before_it_cuts_a_name_then_cuts_it():
    """Columns at their widths plus padding: name 23, count 9, p50 9, p99 9, errors 8, max 9
    (67), then the name's growth, then last 9 and p90 9. At 72 the whole name fits beside
    max but last does not; at 67 the name is back at its base width so that max still fits."""
    first, shown = await _fit(72, [LONG])
    assert first == len(LONG) and "max" in shown and "p90" not in shown and "last" not in shown
    first, shown = await _fit(67, [LONG])
    assert first == 21 and "max" in shown and "last" not in shown


@pytest.mark.parametrize("order", [None, lambda first: first])
async def test_the_cursor_stays_on_its_row_when_a_row_above_it_goes(order):
    """A poll drops a flushed handle's row above the cursor: the cursor stays on the row it was
    on, not on the row that slid into its place (``f`` then flushed the wrong handle: the flaky
    test_object_slots_exhausted_pauses_and_flushing_in_handles_resumes)."""
    app = _TableApp()
    async with app.run_test(size=(120, 10)) as pilot:
        table = app.query_one(KeyedTable)
        keys = ["0x80000000", "0x80000001", "0x80000002"]
        table.sync([(k, _row(k)) for k in keys], order=order)
        await pilot.pause()
        table.move_cursor(row=table.get_row_index("0x80000001"))
        assert table.selected_key == "0x80000001"
        table.sync([(k, _row(k)) for k in keys[1:]], order=order)
        await pilot.pause()
        assert table.selected_key == "0x80000001"
