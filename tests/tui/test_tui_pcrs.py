"""The PCRs panel (key 8) on a live private swtpm, with a root whose securityfs holds the OVMF
log made here: the panel says the log does not replay to this TPM, why (nothing measured into
it, each PCR behind), and the TPM's update counter — read with PCR_Read, which the stream shows."""

from __future__ import annotations

from tests.helpers.pcrs import PCR_FIXTURES
from tests.helpers.tui import SIZE, app_for, main_screen, until
from tpmtop.tui.widgets.pcrs import PcrsPanel


class TestPcrsPanel:
    async def test_key_8_shows_the_replay_against_the_live_tpm(self, live, tmp_path):
        log_dir = tmp_path / "root" / "sys" / "kernel" / "security" / "tpm0"
        log_dir.mkdir(parents=True)
        (log_dir / "binary_bios_measurements").write_bytes(
            (PCR_FIXTURES / "ovmf" / "binary_bios_measurements").read_bytes())
        src = live(start_running=False)
        src.pcrs_root = str(tmp_path / "root")
        app = app_for(src, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("8")
            panel = main_screen(app).query_one(PcrsPanel)

            def text() -> str:
                return str(panel.query_one("#pcrs-text").render())

            await until(pilot, lambda: "nothing-measured" in text(), timeout=60, what="the PCRs panel's verdict")
            assert panel.display
            shown = text()
            assert "crypto-agile, 25 events" in shown
            assert "sha256 DOES NOT MATCH" in shown
            assert "PCR  7 sha256  behind (6 events)" in shown
            assert "pcrUpdateCounter" in shown
        assert "TPM2_CC_PCR_Read" in {e.name for e in src.recorder.events()}
        assert "TPM2_CC_PCR_Extend" not in {e.name for e in src.recorder.events() if e.origin != "workload"}
