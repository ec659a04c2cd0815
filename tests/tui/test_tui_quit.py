"""Quitting the dashboard flushes every handle tpmtop created, on a TPM that outlives it (an
external swtpm: a leak there is what a user's real TPM would keep)."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers.tui import app_for, mode_ops, until
from tpmtop.connect import open_tpm
from tpmtop.sources.live import LiveSource
from tpmtop.tpm.handles import list_handles

SIZE = (120, 40)


@pytest.mark.parametrize("mode", ["reuse", "saved"])
@pytest.mark.parametrize("paused", [False, True])
async def test_quit_leaves_no_session_on_an_external_tpm(tcp_swtpm, tmp_path, mode, paused):
    conn = open_tpm(tcti=tcp_swtpm.tcti)
    src = LiveSource(conn, start_running=True, rate=0, mode=mode, poll_interval=0.3)
    try:
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            # the mode's own operations, so that its session is there to be left behind, or not
            await until(pilot, lambda: mode_ops(src, mode) > 5, what=f"{mode} operations")
            if paused:
                await pilot.press("space")
            await pilot.press("q")
    finally:
        await asyncio.to_thread(src.close)  # what `tpmtop` does when the app returns
    with open_tpm(tcti=tcp_swtpm.tcti) as other:
        left = other.call(list_handles)
    assert left == [], [f"0x{e.handle:08x} {e.kind}" for e in left]
