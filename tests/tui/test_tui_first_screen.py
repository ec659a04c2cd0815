"""Issue 38's dashboard items: what the first screen says, and that every number is printed in
the unit its header names. Real swtpm, nothing mocked."""

from __future__ import annotations

import re

import pytest
from textual.app import App, ComposeResult

from tests.helpers.tui import app_for, header_text, main_screen, until
from tpmtop.tui.widgets.latency import LatencyPanel
from tpmtop.viewmodel.rows.latency import CommandRow
from tpmtop.viewmodel.rows.stream import StreamRow


async def test_the_running_modes_ratio_to_none_is_on_the_first_screen_at_80x24(live, tmp_path):
    """At 80×24 only one panel shows (Latency, not Modes): the header says "per-command ×N vs
    none" with no key pressed, the same number the Modes panel says."""
    src = live(start_running=True, rate=100, mode="per-command")
    app = app_for(src, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: "vs none" in header_text(app), timeout=60, what="'vs none' in the header")
        head = re.search(r"(×[\d.,]+) vs none", header_text(app))
        assert head is not None and "per-command" in header_text(app)
        assert main_screen(app).query_one("#modes").display is False  # not on screen: the header carries it
        bars = main_screen(app).query_one("#modes").query_one("#bars")

        def same_number() -> bool:
            # both from one computation of this run's statistics; drawn at the next tick each
            ratio = re.search(r"(×[\d.,]+) vs none", header_text(app))
            return ratio is not None and f"per-command {ratio.group(1)} vs none" in str(bars.render()).splitlines()[0]

        await until(pilot, same_number, what="the header's ratio and the Modes panel's first line to agree")


class _Latency(App[None]):
    def compose(self) -> ComposeResult:
        yield LatencyPanel(id="latency")


async def _latency_cells(count: int, last_us: float) -> dict[str, str]:
    """One PCR_Extend row of ``count`` samples (p50 850 µs, p99 120,500, max 167,000) as the
    Latency panel shows it at 120×40: header -> cell."""
    app = _Latency()
    row = CommandRow("cc:1", "PCR_Extend", {"count": count, "p50": 850.0, "p90": 900.0, "p99": 120_500.0,
                                            "max": 167_000.0, "mean": 0.0}, last_us=last_us)
    async with app.run_test(size=(120, 40)) as pilot:
        panel = app.query_one(LatencyPanel)
        panel.show([row])
        await pilot.pause()
        return dict(zip([str(c.label) for c in panel.table.ordered_columns],
                        [str(c) for c in panel.table.get_row_at(0)], strict=True))


async def test_latency_columns_headed_us_print_microseconds():
    """A max of 167,000 µs printed "167 ms" under "max µs": every time cell is in µs, whole (from a
    second on without thousands' commas, to fit the column)."""
    shown = await _latency_cells(300, last_us=1_520_000.0)
    for header, cell in shown.items():
        if header.endswith("µs") and cell:
            assert re.fullmatch(r"[\d,]+(\.\d)?", cell), (header, cell)
    assert shown["max µs"] == "167,000" and shown["p99 µs"] == "120,500"
    if "last µs" in shown:
        assert shown["last µs"] == "1520000"


async def test_a_tail_of_too_few_samples_shows_as_not_judged():
    """Of 3 samples the "p99" is their largest: a dash under p90 and p99, figures under p50 and max."""
    from tpmtop.stats import NOT_JUDGED

    shown = await _latency_cells(3, last_us=900.0)
    assert shown["p99 µs"] == NOT_JUDGED and shown["p50 µs"] == "850.0" and shown["max µs"] == "167,000"
    if "p90 µs" in shown:
        assert shown["p90 µs"] == NOT_JUDGED


async def test_home_on_the_frozen_stream_shows_the_oldest_page_whole_at_80x24(live, tmp_path):
    """s then Home showed the oldest command alone above blank lines: the view is the first
    page, every line a command, the oldest on top."""
    src = live(start_running=True, rate=0, mode="none")
    app = app_for(src, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: src.recorder.total > 200, what="200 commands")
        await pilot.press("5", "space")
        src.barrier()
        view = main_screen(app).query_one("#stream-view")
        await pilot.press("s")
        view.focus()
        await pilot.press("home")
        await pilot.pause()
        lines = str(view.render()).splitlines()[1:]  # under the header line
        page = view.size.height - 1
        assert len(view.rows) > page > 5
        assert len(lines) == page and all(line.strip() for line in lines), lines
        assert lines[0].split()[0] == view.rows[0].t.strip()  # the oldest kept, on top


class _Stream(App[None]):
    def compose(self) -> ComposeResult:
        from tpmtop.tui.widgets.stream import StreamView

        yield StreamView(id="stream-view")


def _rows() -> list[StreamRow]:
    return [StreamRow(str(i), f"{i:.3f}", "workload", "PCR_Extend", "00000010", "02000000:01",
                      "0x918 TPM_RC_SESSION_HANDLE" if i == 3 else "ok", "4,275", i != 3) for i in range(1, 6)]


# The stream view's width on the dashboard: the whole width at 80×24 (one panel), the bottom
# row's right-hand panel at 120×40 (72 columns with its border).
@pytest.mark.parametrize("width", [78, 70])
async def test_the_stream_shows_each_handle_and_response_code_whole(width):
    """The session column read "020000…" and the rc column "0x918…": a handle is shown whole, and
    a response code keeps its number whole where its name does not fit."""
    app = _Stream()
    async with app.run_test(size=(width, 12)) as pilot:
        view = app.query_one("#stream-view")
        view.set_rows(_rows())
        await pilot.pause()
        text = str(view.render())
        assert "…" not in text, text
        assert "02000000" in text and "00000010" in text
        assert "0x918" in text.splitlines()[3]
