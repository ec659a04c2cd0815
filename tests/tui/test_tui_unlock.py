"""The Unlock panel (key u) on a live swtpm whose LUKS2 image systemd-cryptenroll (PCR 16) and
clevis (PCRs 16, 23) enrolled: both tokens would unseal; after PCR 16 is extended (one
PCR_Extend on the source's own connection: a swtpm serves one client at a time) the panel's
next PCR reading turns both into "would not: PCR 16 (sha256) differs" — at 80×24 and 120×40."""

from __future__ import annotations

import struct

import pytest

from tests.helpers.luks import enroll_clevis, enroll_systemd, make_image
from tests.helpers.tui import app_for, main_screen, until
from tpmtop.sources.live import LiveSource
from tpmtop.tpm.commands import check
from tpmtop.tui.widgets.unlock import UnlockPanel

CC_PCR_EXTEND = 0x182


def _extend_16(transport) -> None:
    """PCR_Extend(16, sha256) with an empty password session (TPM_RS_PW)."""
    auth = struct.pack(">IHBH", 0x40000009, 0, 0, 0)
    body = (struct.pack(">I", 16) + struct.pack(">I", len(auth)) + auth
            + struct.pack(">IH", 1, 0x000B) + bytes(range(32)))
    check(transport.transact(struct.pack(">HII", 0x8002, 10 + len(body), CC_PCR_EXTEND) + body), CC_PCR_EXTEND)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_key_u_judges_the_tokens_and_follows_pcr_16(size, tcp_swtpm, tmp_path):
    img = make_image(tmp_path)
    enroll_systemd(img, tcp_swtpm.tcti, "--tpm2-pcrs=16")
    enroll_clevis(img, tcp_swtpm.tcti, "tpm2", {"pcr_bank": "sha256", "pcr_ids": "16,23"})
    src = LiveSource(tcp_swtpm.connect(), poll_interval=0.3, start_running=False)
    src.unlock_devices = [img]
    try:
        app = app_for(src, tmp_path)
        async with app.run_test(size=size) as pilot:
            await pilot.press("u")
            panel = main_screen(app).query_one(UnlockPanel)

            def text() -> str:
                return str(panel.query_one("#unlock-text").render())

            await until(pilot, lambda: text().count("would unseal now") == 2, timeout=120,
                        what="both tokens judged")
            assert panel.display
            shown = text()
            assert "token 0 (systemd-tpm2), PCR 16 (sha256)" in shown
            assert "token 1 (clevis-tpm2), PCRs 16, 23 (sha256)" in shown
            src.run_on_owner(_extend_16)
            await until(pilot, lambda: text().count("would not: PCR 16 (sha256) differs") == 2, timeout=120,
                        what="the next PCR reading's verdicts")
            assert "would unseal" not in text()
    finally:
        src.close()
