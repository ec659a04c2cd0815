"""The Boot screen (b): the `tpmtop boot` report, built in a worker, without TPM traffic."""

from __future__ import annotations

from tests.helpers.paths import TESTS
from tests.helpers.tui import SIZE, app_for, until
from tpmtop.boot.report import build_report
from tpmtop.boot.rootfs import RootReader
from tpmtop.sources.replay import ReplaySource, load
from tpmtop.tui.app import TpmtopApp
from tpmtop.tui.screens.boot import BootScreen

LAPTOP = TESTS / "fixtures" / "boot" / "laptop-6.10-hmac"
CAPTURE = TESTS / "tui_fixtures" / "slb9670-extend.json"


def _text(screen, wid) -> str:
    return str(screen.query_one(wid).render())


async def test_b_shows_the_same_verdict_as_tpmtop_boot():
    """b opens the report of a fixture laptop (6.10, HMAC on); its verdict is the CLI's, word for word."""
    expected = build_report(RootReader(str(LAPTOP))).verdict
    assert expected.startswith("HMAC per-command sessions cost at most 11.1 s")  # bounded by the boot
    app = TpmtopApp(ReplaySource(load(CAPTURE), CAPTURE), theme="dark", remember=False, boot_root=str(LAPTOP))
    async with app.run_test(size=SIZE) as pilot:
        assert "boot: Show report" in [c.title for c in app.get_system_commands(app.screen)]
        await pilot.press("b")
        assert isinstance(app.screen, BootScreen)
        await until(pilot, lambda: app.screen.built, what="report built")
        # The Static wraps at the screen width: compare without the line breaks.
        assert " ".join(_text(app.screen, "#boot-verdict").split()) == " ".join(expected.split())
        assert "initcall_debug: 4 TPM/IMA initcalls, 347,632 µs, of 5 initcalls logged" in _text(app.screen,
                                                                                                   "#boot-text")
        await pilot.press("escape")
        assert not isinstance(app.screen, BootScreen)


async def test_boot_report_on_a_live_dashboard_sends_no_tpm_command(live, tmp_path):
    """Building the report sends nothing to the TPM: only the poller's commands appear meanwhile."""
    src = live(start_running=False, poll_interval=60)  # one poll at start, then quiet
    app = app_for(src, tmp_path, boot_root=str(LAPTOP))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: src.identity is not None, what="first poll")
        await pilot.pause(0.2)
        before = src.recorder.total
        await pilot.press("b")
        await until(pilot, lambda: isinstance(app.screen, BootScreen) and app.screen.built, what="report built")
        assert src.recorder.total == before
        assert "no TPM command" in _text(app.screen, "#boot-title")
