"""Issue 38: a dashboard that opens on a simulator because no TPM was usable says so, and why,
on its first screen (the header and the message line) — never only on stderr after quitting.
A real swtpm answers; the fallback is chosen as `tpmtop` chooses it, on a device path that
does not exist."""

from __future__ import annotations

import pytest

from tests.helpers.tui import app_for, header_text, main_screen, message_line, until
from tpmtop.recorder import Recorder
from tpmtop.sources.live import LiveSource
from tpmtop.tpm.connection import TpmConnection
from tpmtop.tpm.tcti import choose


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_fallback_reason_on_the_first_screen(tmp_path, size):
    target = choose(None, False, env={}, device="/nonexistent/tpmrm0", fallback=True)
    conn = TpmConnection(target, Recorder()).open()
    src = LiveSource(conn, start_running=False, poll_interval=0.3)
    try:
        app = app_for(src, tmp_path)
        async with app.run_test(size=size) as pilot:
            screen = main_screen(app)
            await until(pilot, lambda: src.identity is not None, what="first poll")
            await until(pilot, lambda: "no /nonexistent/tpmrm0" in message_line(screen), what="the message")
            assert "simulated TPM" in message_line(screen)
            await until(pilot, lambda: "simulated (no /nonexistent/tpmrm0)" in header_text(app),
                        what="the header's reason")
        cap_tpm = src.tpm_json()
        assert cap_tpm["simulated"] is True and "no /nonexistent/tpmrm0" in cap_tpm["simulated_reason"]
    finally:
        src.close()


async def test_sim_on_purpose_says_simulated_without_a_warning(tmp_path, live):
    src = live(start_running=False)
    app = app_for(src, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: src.identity is not None, what="first poll")
        await pilot.pause(0.3)
        assert "simulated" in header_text(app) and "(no " not in header_text(app)
        assert "simulated TPM" not in message_line(main_screen(app))
    assert src.tpm_json()["simulated_reason"] == "--sim was given"
