"""The Health panel (key 8) at 120×40 and 80×24: each verdict of `tpmtop health` shows, from a
live swtpm one wrong password from lockout (its counter as the handle poll reads it) and from a
passive source on a tree saved from a real guest whose TPM died (tests/fixtures/health)."""

from __future__ import annotations

import shutil

import pytest

from tests.helpers.da import da_swtpm_factory, tools  # noqa: F401 (a fixture)
from tests.helpers.paths import REPO
from tests.helpers.tui import app_for, main_screen, until
from tpmtop.connect import open_tpm
from tpmtop.health.verdicts import Area, Kind
from tpmtop.sources.live import LiveSource
from tpmtop.sources.passive import PassiveSource, Sysfs

DEAD_TPM = REPO / "tests" / "fixtures" / "health" / "debian-6.12-dead-tpm"
SIZES = [(120, 40), (80, 24)]


def _panel_text(screen) -> str:
    return str(screen.query_one("#health-text").render())




def _all_on_screen(screen) -> None:
    """Every line of the panel's text lies inside the panel as drawn, and the panel inside the
    screen: nothing of it is cut off (a verdict below the border would not be seen)."""
    panel, text = screen.query_one("#health"), screen.query_one("#health-text")
    inner = panel.content_region
    assert text.region.y >= inner.y and text.region.bottom <= inner.bottom, (text.region, inner)
    assert text.virtual_size.height <= text.region.height, (text.virtual_size, text.region)
    assert panel.region.bottom <= screen.region.bottom


async def _show_health(pilot, screen):
    await pilot.press("8")
    await until(pilot, lambda: screen.query_one("#health").display and screen.query_one("#health").size.height > 2,
                what="the Health panel shown")


@pytest.mark.parametrize("size", SIZES, ids=["120x40", "80x24"])
async def test_health_panel_shows_every_system_verdict_of_a_dead_tpm_guest(size, tmp_path):
    app = app_for(PassiveSource(Sysfs(DEAD_TPM)), tmp_path)
    async with app.run_test(size=size) as pilot:
        screen = main_screen(app)
        await _show_health(pilot, screen)
        await until(pilot, lambda: "problem" in _panel_text(screen), what="the verdicts")
        text = _panel_text(screen)
        for kind in Kind:
            if kind.area is not Area.LOCKOUT:
                assert kind.label in text, kind
        assert "TPM-bypass" in text  # IMA's verdict on this guest
        assert "FAIL" in text and "the firmware declares a TPM and there is no /dev/tpm0" in text
        assert "no TPM polled here" in text  # the lockout line of a source without a TPM
        _all_on_screen(screen)


@pytest.mark.skipif(shutil.which("tpm2_unseal") is None, reason="tpm2-tools not installed")
@pytest.mark.parametrize("size", SIZES, ids=["120x40", "80x24"])
async def test_health_panel_warns_one_try_before_lockout(size, da_swtpm_factory, tmp_path):
    s = da_swtpm_factory(4, 3600)
    for _ in range(3):
        tools(s, "tpm2_unseal", "-c", "s.ctx", "-p", "wrong", cwd=s.work, check=False)
        tools(s, "tpm2_flushcontext", "-t", cwd=s.work)
    src = LiveSource(open_tpm(tcti=s.tcti, env={}), start_running=False, poll_interval=0.3)
    try:
        app = app_for(src, tmp_path)
        async with app.run_test(size=size) as pilot:
            screen = main_screen(app)
            await _show_health(pilot, screen)
            await until(pilot, lambda: "counter 3 of 4" in _panel_text(screen), what="the DA counter")
            text = _panel_text(screen)
            assert "FAIL" in text and "ONE more wrong password" in text
            _all_on_screen(screen)
    finally:
        src.close()
