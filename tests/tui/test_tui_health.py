"""The Health panel (key 8) at 120×40 and 80×24: each verdict of `tpmtop health` shows, from a
live swtpm one wrong password from lockout (its counter as the handle poll reads it) and from a
passive source on a tree saved from a real guest whose TPM died (tests/fixtures/health)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess

import pytest

from tests.helpers.da import da_swtpm_factory, tools  # noqa: F401 (a fixture)
from tests.helpers.paths import REPO
from tests.helpers.processes import free_port_pair
from tests.helpers.tui import app_for, main_screen, until
from tpmtop.connect import open_tpm
from tpmtop.health.verdicts import Area, Kind
from tpmtop.proxy.server import ProxyServer
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
    await pilot.press("9")
    await until(pilot, lambda: screen.query_one("#health").display and screen.query_one("#health").size.height > 2,
                what="the Health panel shown")


@pytest.mark.parametrize("size", SIZES, ids=["120x40", "80x24"])
async def test_health_panel_shows_every_system_verdict_of_a_dead_tpm_guest(size, tmp_path):
    app = app_for(PassiveSource(Sysfs(DEAD_TPM)), tmp_path)
    async with app.run_test(size=size) as pilot:
        screen = main_screen(app)
        await _show_health(pilot, screen)
        await until(pilot, lambda: "problem" in str(screen.query_one("#health").border_subtitle), what="the verdicts")
        assert screen.query_one("#health").border_subtitle.startswith("2 problem(s)")
        text = _panel_text(screen)
        for kind in Kind:
            # the TPM's (no TPM here) and this machine's processes (a saved tree has none)
            # and what only a capture shows (the kernel's waits against CreatePrimary's time)
            if kind.area not in (Area.LOCKOUT, Area.STATE) and kind not in (Kind.HOLDERS, Kind.CMD_TIMEOUTS):
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


@pytest.mark.skipif(shutil.which("tpm2_unseal") is None, reason="tpm2-tools not installed")
async def test_health_panel_names_who_sent_wrong_passwords_through_listen(da_swtpm_factory, tmp_path):
    """With --listen the panel names the proxy's client behind each wrong password, beside the
    counter they moved."""
    s = da_swtpm_factory(4, 3600)
    src = LiveSource(open_tpm(tcti=s.tcti, env={}), start_running=False, poll_interval=0.3)
    port = free_port_pair()
    src.proxy = ProxyServer(src.conn, port=port, log=lambda _line: None).start()
    try:
        app = app_for(src, tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = main_screen(app)
            await _show_health(pilot, screen)
            env = dict(os.environ, TPM2TOOLS_TCTI=f"swtpm:host=127.0.0.1,port={port}", TSS2_LOG="all+NONE")
            for _ in range(2):
                proc = await asyncio.create_subprocess_exec("tpm2_unseal", "-c", str(s.work / "s.ctx"), "-p", "wrong",
                                                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                await asyncio.wait_for(proc.communicate(), 60)
                assert proc.returncode != 0
            await until(pilot, lambda: "counter 2 of 4" in _panel_text(screen)
                        and "tpm2_unseal ×2" in _panel_text(screen), what="the counter and who moved it")
            text = _panel_text(screen)
            assert "auth failures" in text and "2 wrong password(s) in the proxy's clients" in text
            _all_on_screen(screen)
    finally:
        src.proxy.stop()
        src.close()
