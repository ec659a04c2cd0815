"""--passive: no TPM connection at all; the dashboard reads sysfs/securityfs only and marks
the panels that would need TPM traffic."""

from __future__ import annotations

import pytest

from tpmtop.sources.passive import PassiveSource, Sysfs
from tpmtop.tui.app import TpmtopApp


@pytest.fixture
def fake_root(tmp_path):
    tpm = tmp_path / "sys/class/tpm/tpm0"
    (tpm / "pcr-sha256").mkdir(parents=True)
    (tpm / "tpm_version_major").write_text("2\n")
    (tpm / "null_name").write_text("000b" + "ab" * 32 + "\n")
    (tpm / "pcr-sha256" / "10").write_text("AB" * 32 + "\n")
    ima = tmp_path / "sys/kernel/security/ima"
    ima.mkdir(parents=True)
    (ima / "runtime_measurements_count").write_text("1234\n")
    (tmp_path / "sys/module/tpm/parameters").mkdir(parents=True)
    (tmp_path / "sys/module/tpm/parameters/disable_pcr_integrity").write_text("N\n")
    return tmp_path


def test_sysfs_reader(fake_root):
    s = Sysfs(fake_root).read()
    assert s.tpm_present and s.hmac_compiled and s.tpm_version == "2"
    assert s.ima_count == 1234 and s.pcrs[10] == "ab" * 32 and s.disable_pcr_integrity == "N"
    missing = Sysfs(fake_root / "nowhere").read()
    assert not missing.tpm_present and missing.ima_count is None and len(missing.notes) == 2


async def test_passive_dashboard_reads_sysfs_and_shows_only_system(fake_root, tmp_path, monkeypatch):
    """The System panel shows IMA and PCRs across the whole width; the panels that need TPM
    traffic are not shown at all (issue #15 item 7: five of six said so, System got 46 columns)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    app = TpmtopApp(PassiveSource(Sysfs(fake_root)), remember=False)
    async with app.run_test(size=(140, 44)) as pilot:
        await pilot.pause(0.3)
        (fake_root / "sys/kernel/security/ima/runtime_measurements_count").write_text("1300\n")
        await pilot.pause(1.3)
        screen = app.screen
        text = str(screen.query_one("#sysfs").render())
        assert "IMA measurements" in text and "PCR 10" in text and "HMAC sessions compiled in" in text
        assert "1,300" in text
        for pid in ("handles", "resources", "latency", "modes", "stream"):
            assert not screen.query_one(f"#{pid}").display
        assert screen.query_one("#system").size.width >= 130
        header = str(screen.query_one("#header").render())
        assert "passive" in header and "kernel TPM (not contacted)" in header
        assert not screen.check_action("toggle_workload", ())


async def test_passive_without_a_tpm_says_so(tmp_path, monkeypatch):
    """No /sys/class/tpm/tpm0: the header says there is no TPM, as System does."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    app = TpmtopApp(PassiveSource(Sysfs(tmp_path)), remember=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.5)
        header = str(app.screen.query_one("#header").render())
        assert "no TPM here" in header and "not contacted" not in header
        assert "no " in str(app.screen.query_one("#sysfs").render())
