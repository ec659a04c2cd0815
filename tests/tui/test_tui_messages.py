"""Issue 24 item 7: messages have a line of their own and a log a key away; no toast ever covers
a number (they covered Handles, Latency's p50 column, the whole left column, the Boot report)."""

from __future__ import annotations

from tests.helpers.tui import SIZE, app_for, main_screen, message_line, until
from tpmtop.tui.screens.boot import BootScreen
from tpmtop.tui.widgets.messages import MessageLine, MessageLogScreen


def _overlaps(a, b) -> bool:
    return a.overlaps(b) if a.area and b.area else False


def _shown_toasts(app) -> list:
    return [t for t in app.screen.query("Toast") if t.display and t.region.area]  # by its type's name: public


class TestMessages:
    async def test_three_messages_cover_nothing_and_the_log_keeps_them(self, live, tmp_path):
        """T, an export and a theme change: each message shows in the line above the footer,
        the line overlaps no panel, no toast is drawn, and l lists all three."""
        src = live(start_running=True, rate=100)
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            screen = main_screen(app)
            await until(pilot, lambda: src.identity is not None, what="first poll")
            await pilot.press("T")
            await until(pilot, lambda: "TCTI" in message_line(screen), what="T's message in the line")
            await until(pilot, lambda: sum(a.ops for a in src.accounts().values()) > 0, what="ops")
            await pilot.press("x")
            await until(pilot, lambda: "capture written" in message_line(screen), what="the export's message")
            await pilot.press("t")
            await until(pilot, lambda: "theme" in message_line(screen), what="the theme's message")
            await pilot.pause(0.2)
            line = screen.query_one(MessageLine)
            assert line.region.height == 1
            for panel in screen.query(".panel"):
                if panel.display:
                    assert not _overlaps(line.region, panel.region), panel.id
            assert _shown_toasts(app) == []
            assert "l messages (" in str(screen.query_one("#message-hint").render())
            await pilot.press("l")
            await until(pilot, lambda: isinstance(app.screen, MessageLogScreen), what="the log")
            logged = " ".join(str(w.render()) for w in app.screen.query(".logged-message"))
            for word in ("TCTI", "capture written", "theme"):
                assert word in logged, word
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is screen, what="back")

    async def test_a_message_never_covers_the_boot_report(self, live, tmp_path):
        """T then b: the Boot report is whole (no toast over it); its own line carries the message."""
        src = live(start_running=False)
        app = app_for(src, tmp_path, boot_root=str(tmp_path))
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: src.identity is not None, what="first poll")
            await pilot.press("T", "b")
            await until(pilot, lambda: isinstance(app.screen, BootScreen), what="the boot screen")
            await pilot.pause(0.3)
            assert _shown_toasts(app) == []
            boot_line = app.screen.query_one(MessageLine)
            assert "TCTI" in message_line(app.screen)
            assert not _overlaps(boot_line.region, app.screen.query_one("#boot-scroll").region)
            await pilot.press("l")  # the hint's key works here too
            await until(pilot, lambda: isinstance(app.screen, MessageLogScreen), what="the log from Boot")
