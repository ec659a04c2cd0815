"""The Stream's columns at 120×40 and 80×24 (user test): frozen, a 2-wide scrollbar took the
sessions' place ("400000…", "020000…") that following showed whole; and at 120×40 the panel is
narrower than at 80×24, so PCR_Extend's session lost its attributes ("00000010 02000000") that
80×24 showed ("00000010 · 02000000:00"). Read from what the view draws, on a real swtpm."""

from __future__ import annotations

import re

import pytest
from textual.geometry import Region

from tests.helpers.tui import app_for, main_screen, until
from tpmtop.tui.widgets.stream import COLUMNS, TIGHT


def _lines(view) -> list[str]:
    """The stream's lines as the view draws them (its padding included), trailing spaces cut."""
    w, h = view.region.width, view.region.height
    return [s.text.rstrip() for s in view.render_lines(Region(0, 0, w, h))]


def _unpadded_us(header: str) -> str:
    return re.sub(r" +µs", " µs", header)


def _last_column(lines: list[str], command: str) -> set[str]:
    """What the workload's rows of ``command`` show after their rc column."""
    return {re.split(r" ok +", s, maxsplit=1)[1] for s in lines if f" workload {command} " in s and " ok " in s}


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_frozen_and_following_draw_the_same_columns(live, tmp_path, size):
    src = live(start_running=True, rate=0, mode="per-command")
    app = app_for(src, tmp_path)
    async with app.run_test(size=size) as pilot:
        screen = main_screen(app)
        await pilot.press("5")  # at 80×24 the stream is a tab of its own
        view = screen.query_one("#stream-view")
        page: list[list[str]] = [[]]

        def both_shown() -> bool:
            page[0] = _lines(view)
            return bool(_last_column(page[0], "PCR_Extend") and _last_column(page[0], "StartAuthSession"))

        def us_padding(header: str) -> int:
            """Spaces before the µs header: more where the page holds a figure over 99,999 µs."""
            return len(re.search(r"command( +)µs", header).group(1))

        # the command column's room after its header, a space, the µs column's before its header
        # (the Stream at 120×40 is the narrower: its µs column is the tight one)
        widths = dict(COLUMNS)
        us = TIGHT["µs"] if size == (120, 40) else widths["µs"]
        normal = widths["command"] - len("command") + 1 + us - len("µs")
        # The µs column widens for a page that holds a figure over 99,999 µs, which a loaded
        # machine can put on either page, and the last column then has less room: such a pair
        # says nothing about the scrollbar, so it is drawn again (a stress run at load 12 put a
        # 188,477 µs FlushContext on one).
        for _attempt in range(10):
            await until(pilot, both_shown, what="PCR_Extend and StartAuthSession rows, following")
            following = page[0]
            await pilot.press("s")
            await until(pilot, lambda: "frozen" in str(screen.query_one("#stream").border_subtitle), what="frozen")
            view.focus()
            for _ in range(2000):  # frozen on a page of polls: back to the workload's rows
                if both_shown():
                    break
                await pilot.press("up")
            else:
                raise AssertionError(f"no PCR_Extend and StartAuthSession rows frozen: {page[0]}")
            frozen = page[0]
            if us_padding(frozen[0]) == us_padding(following[0]) == normal:
                break
            await pilot.press("s")  # follow again, for a fresh pair of pages
            await until(pilot, lambda: "frozen" not in str(screen.query_one("#stream").border_subtitle),
                        what="following again")
        else:
            raise AssertionError(f"no pair of pages without a figure over 99,999 µs in 10: {frozen[0]!r}")
        assert _unpadded_us(frozen[0]) == _unpadded_us(following[0])
        # 120×40 has no room for the separator, but shows all 80×24 shows: the session's attributes
        session = "00000010 02000000:00" if size == (120, 40) else "00000010 · 02000000:00"
        for lines in (following, frozen):
            assert _last_column(lines, "PCR_Extend") == {session}, lines
            assert _last_column(lines, "StartAuthSession") == {"80000000 40000007"}, lines
            assert not any("…" in s for s in lines), lines
